"""Tensor expressions as plain JSON data, and back.

A record log carries the serialised DAG of each task it holds, so that any process can rebuild
the DAG without the user's module: `autosched show LOG` in a fresh shell, the search's spawned
workers for a workload defined in a script's `__main__`. The data is a list of ops in
topological order (inputs first) and the indices of the DAG's argument tensors:

    {"version": 1, "ops": [op, ...], "args": [index, ...]}
    op   = {"op": "placeholder", "name", "shape", "dtype"}
         | {"op": "compute", "name", "tag", "axis": [[name, extent]...],
            "reduce_axis": [[name, lo, extent]...], "body": expr}
    expr = nested lists, one tag per node kind (see ENCODERS)

Axes are written by position (`["axis", i]`, `["raxis", i]`), loads by op index, so the rebuilt
expressions have the same structure and names; reducers by name, a user-defined reducer as its
combine expression over two variables and its identity element for the dtype used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from autosched.errors import TEError
from autosched.te.expr import (
    BinOp,
    Call,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Not,
    Reduce,
    Select,
    Var,
)
from autosched.te.reduce import BUILTIN_REDUCERS, Reducer
from autosched.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, topological_ops
from autosched.te.visitor import substitute, walk

VERSION = 1


def _number(value: Any) -> Any:
    """JSON has no inf/nan: write them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if hasattr(value, "item"):  # numpy scalars
        return _number(value.item())
    return value


def _parse_number(value: Any) -> Any:
    return float(value) if isinstance(value, str) else value


class _Writer:
    """Encodes the expressions of one op; axes and ops are referred to by position."""

    def __init__(self, op_index: dict[int, int], op: ComputeOp) -> None:
        self.op_index = op_index
        self.axes = {id(a): i for i, a in enumerate(op.axis)}
        self.raxes = {id(a): i for i, a in enumerate(op.reduce_axis)}

    def __call__(self, e: Expr | None) -> Any:
        if e is None:
            return None
        encode = ENCODERS.get(type(e))
        if encode is None:
            raise TEError(f"cannot serialise a {type(e).__name__} expression: {e!r}")
        return encode(self, e)

    def var(self, e: Var) -> list:
        if id(e) in self.axes:
            return ["axis", self.axes[id(e)]]
        if id(e) in self.raxes:
            return ["raxis", self.raxes[id(e)]]
        return ["var", e.name, e.dtype]

    def reducer(self, r: Reducer, dtype: str) -> Any:
        if BUILTIN_REDUCERS.get(r.name) is r:
            return r.name
        x, y = Var("x", dtype), Var("y", dtype)
        return {
            "name": r.name,
            "combine": self(r.combine(x, y)),
            "identity": _number(r.identity(dtype).value),
        }


ENCODERS: dict[type, Callable[[_Writer, Any], Any]] = {
    Const: lambda w, e: ["const", e.dtype, _number(e.value)],
    Var: _Writer.var,
    IterVar: _Writer.var,
    BinOp: lambda w, e: ["bin", e.op, w(e.a), w(e.b), e.dtype],
    Not: lambda w, e: ["not", w(e.a)],
    Select: lambda w, e: ["select", e.style, w(e.cond), w(e.t), w(e.f)],
    Cast: lambda w, e: ["cast", e.dtype, w(e.value)],
    Call: lambda w, e: ["call", e.func, [w(a) for a in e.args], e.dtype],
    Load: lambda w, e: ["load", w.op_index[id(e.buffer.op)], [w(i) for i in e.indices]],
    Reduce: lambda w, e: ["reduce", w.reducer(e.reducer, e.dtype), w(e.source), w(e.condition)],
}


def dump_tensors(tensors: Sequence[Tensor]) -> dict:
    """The JSON-able form of the tensors' ops (and of everything they read)."""
    ops = topological_ops([t.op for t in tensors])
    index = {id(op): i for i, op in enumerate(ops)}
    out: list[dict[str, Any]] = []
    for op in ops:
        if isinstance(op, PlaceholderOp):
            out.append(
                {"op": "placeholder", "name": op.name, "shape": list(op.shape), "dtype": op.dtype}
            )
            continue
        assert isinstance(op, ComputeOp)
        out.append(
            {
                "op": "compute",
                "name": op.name,
                "tag": op.tag,
                "axis": [[a.name, a.extent] for a in op.axis],
                "reduce_axis": [[a.name, a.lo, a.extent] for a in op.reduce_axis],
                "attrs": {k: v for k, v in op.attrs.items() if isinstance(v, (int, float, str))},
                "body": _Writer(index, op)(op.body),
            }
        )
    return {"version": VERSION, "ops": out, "args": [index[id(t.op)] for t in tensors]}


class _Reader:
    """Decodes the expressions of one op, given the ops decoded before it."""

    def __init__(self, ops: list[Operation], axis: tuple, raxis: tuple) -> None:
        self.ops, self.axis, self.raxis = ops, axis, raxis

    def __call__(self, data: Any) -> Any:
        if data is None:
            return None
        try:
            decode = DECODERS[data[0]]
        except (KeyError, TypeError, IndexError):
            raise TEError(f"unknown expression {str(data)[:80]!r} in a serialised DAG") from None
        return decode(self, *data[1:])

    def reducer(self, data: Any) -> Reducer:
        if isinstance(data, str):
            if data not in BUILTIN_REDUCERS:
                raise TEError(f"unknown reducer {data!r} in a serialised DAG")
            return BUILTIN_REDUCERS[data]
        combine = self(data["combine"])
        free = {v.name: v for v in _vars(combine)}
        x, y = free.get("x"), free.get("y")
        identity = _parse_number(data["identity"])

        def fcombine(a: Expr, b: Expr) -> Expr:
            mapping = {k: v for k, v in ((x, a), (y, b)) if k is not None}
            return substitute(combine, mapping)

        return Reducer(data["name"], fcombine, lambda dtype: identity)

    def reduce(self, reducer: Any, source: Any, condition: Any) -> Reduce:
        return Reduce(self.reducer(reducer), self(source), self.raxis, self(condition))


def _vars(e: Expr) -> list[Var]:
    return [n for n in walk(e) if type(n) is Var]


DECODERS: dict[str, Callable[..., Any]] = {
    "const": lambda r, dtype, value: Const(_parse_number(value), dtype),
    "axis": lambda r, i: r.axis[i],
    "raxis": lambda r, i: r.raxis[i],
    "var": lambda r, name, dtype: Var(name, dtype),
    "bin": lambda r, op, a, b, dtype: BinOp(op, r(a), r(b), dtype),
    "not": lambda r, a: Not(r(a)),
    "select": lambda r, style, c, t, f: Select(r(c), r(t), r(f), style=style),
    "cast": lambda r, dtype, v: Cast(dtype, r(v)),
    "call": lambda r, func, args, dtype: Call(func, [r(a) for a in args], dtype),
    "load": lambda r, op, idx: Load(r.ops[op].output(0), [r(i) for i in idx]),
    "reduce": _Reader.reduce,
}


def load_tensors(data: dict) -> list[Tensor]:
    """Rebuild the argument tensors of `dump_tensors` output (new ops, same structure)."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise TEError(f"not a serialised DAG of version {VERSION}: {str(data)[:80]!r}")
    ops: list[Operation] = []
    try:
        for spec in data["ops"]:
            if spec["op"] == "placeholder":
                ops.append(PlaceholderOp(tuple(spec["shape"]), spec["dtype"], spec["name"]))
                continue
            axis = tuple(IterVar(n, 0, ext, IterVar.SPATIAL) for n, ext in spec["axis"])
            raxis = tuple(IterVar(n, lo, ext, IterVar.REDUCE) for n, lo, ext in spec["reduce_axis"])
            body = _Reader(ops, axis, raxis)(spec["body"])
            ops.append(ComputeOp(spec["name"], spec["tag"], axis, body, dict(spec["attrs"])))
        return [ops[i].output(0) for i in data["args"]]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise TEError(f"malformed serialised DAG ({type(exc).__name__}: {exc})") from None
