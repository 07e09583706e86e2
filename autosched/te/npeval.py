"""Vectorised numpy evaluation of expression trees.

`eval_expr` evaluates an expression for many points at once: every variable is bound to a numpy
array (or an int) and the arrays broadcast against each other. Reading buffers is left to a
callback, so the same evaluator serves the naive DAG evaluator (`autosched.task.evaluate`) and
the CPU interpreter of lowered kernels (where buffers are per-thread arrays).

Masks: `mask` marks where a value is actually needed. `Select(c, t, f)` evaluates `t` only under
`mask & c` and `f` under `mask & ~c`, so a padded load that is out of bounds on the untaken side is
legal; `gather` clips such indices and raises on an out-of-bounds index where the mask holds.

Semantics: integer arithmetic runs in numpy's integer types (int32 indices usually become int64);
`floordiv`/`floormod` use Python's floor semantics; float expressions keep their dtype (float16
stays float16), so a float32 expression yields a float32 array. bfloat16 values are float32
arrays holding bfloat16 numbers: loads decode the stored bit patterns, and every bfloat16
operation rounds its float32 result (`autosched.te.dtype` states the half-precision rule, which
the CUDA printer follows too); casts to a half dtype go through float32, as the printer's do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autosched.errors import AutoschedError, TEError
from autosched.te.dtype import compute_dtype, from_storage, is_half, round_to
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

Value = Any  # an np.ndarray or a numpy scalar
LoadFn = Callable[[Load, list, "np.ndarray | None"], Value]


class OutOfBoundsError(AutoschedError, IndexError):
    """A buffer was read out of bounds at a point where the value is needed."""


def _erf(x: Value) -> Value:
    # math.erf is exact to double precision; numpy has no erf of its own.
    out = np.frompyfunc(math.erf, 1, 1)(np.asarray(x, dtype=np.float64))
    return np.asarray(out, dtype=np.float64).astype(np.asarray(x).dtype)


def _typed(fn: Callable[..., Value]) -> Callable[..., Value]:
    """Wrap `fn` so its result keeps the dtype of its first argument."""

    def run(*args: Value) -> Value:
        dtype = np.asarray(args[0]).dtype
        return np.asarray(fn(*args)).astype(dtype, copy=False)

    return run


BINARY = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.true_divide,
    "floordiv": np.floor_divide,
    "floormod": np.mod,
    "min": np.minimum,
    "max": np.maximum,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
    "&&": np.logical_and,
    "||": np.logical_or,
}

# log2(e), which a fast exponential multiplies its argument by (as a float32 in float32 code)
LOG2_E = 1.4426950408889634

CALLS: dict[str, Callable[..., Value]] = {
    "exp": _typed(np.exp),
    # the device's fast exponential (`__expf`, lower/fast_exp.py): x times log2(e) rounded to
    # float32, then 2 to that power
    "fast_exp": _typed(lambda x: np.exp2(x * np.asarray(LOG2_E, np.asarray(x).dtype))),
    "log": _typed(np.log),
    "sqrt": _typed(np.sqrt),
    "rsqrt": _typed(lambda x: 1 / np.sqrt(x)),
    "tanh": _typed(np.tanh),
    "sigmoid": _typed(lambda x: 1 / (1 + np.exp(-x))),
    "erf": _erf,
    "abs": np.abs,
    "pow": _typed(np.power),
    "floor": _typed(np.floor),
    "ceil": _typed(np.ceil),
}


def _and_mask(mask: Value | None, cond: Value) -> Value:
    return cond if mask is None else np.logical_and(mask, cond)


class _Evaluator:
    """One evaluation: the bindings, the load callback, and a memo of shared sub-trees."""

    def __init__(self, env: dict[int, Value], load: LoadFn) -> None:
        self.env = env
        self.load = load
        # (id(node), id(mask)) -> (value, mask); the mask is kept alive so its id stays unique.
        self.memo: dict[tuple[int, int], tuple[Value, Any]] = {}

    def __call__(self, e: Expr, mask: Value | None) -> Value:
        key = (id(e), id(mask))
        hit = self.memo.get(key)
        if hit is not None:
            return hit[0]
        handler = HANDLERS.get(type(e))
        if handler is None:
            handler = next((h for cls, h in HANDLERS.items() if isinstance(e, cls)), None)
            if handler is None:
                raise TEError(f"cannot evaluate a {type(e).__name__} node: {e!r}")
        value = handler(self, e, mask)
        self.memo[key] = (value, mask)
        return value


def _const(ev: _Evaluator, e: Const, mask: Value | None) -> Value:
    if is_half(e.dtype):  # through float32, as the CUDA printer writes half literals
        return round_to(np.float32(e.value), e.dtype)[()]
    return compute_dtype(e.dtype).type(e.value)


def _var(ev: _Evaluator, e: Var, mask: Value | None) -> Value:
    try:
        return ev.env[id(e)]
    except KeyError:
        raise TEError(f"variable {e.name!r} has no value in this evaluation") from None


def _binop(ev: _Evaluator, e: BinOp, mask: Value | None) -> Value:
    out = BINARY[e.op](ev(e.a, mask), ev(e.b, mask))
    return round_to(out, e.dtype) if e.dtype == "bfloat16" else out


def _not(ev: _Evaluator, e: Not, mask: Value | None) -> Value:
    return np.logical_not(ev(e.a, mask))


def _select(ev: _Evaluator, e: Select, mask: Value | None) -> Value:
    cond = np.asarray(ev(e.cond, mask), dtype=bool)
    t = ev(e.t, _and_mask(mask, cond))
    f = ev(e.f, _and_mask(mask, np.logical_not(cond)))
    return np.where(cond, t, f)


def _cast(ev: _Evaluator, e: Cast, mask: Value | None) -> Value:
    value = np.asarray(ev(e.value, mask))
    if is_half(e.dtype):
        return round_to(value.astype(np.float32), e.dtype)
    return value.astype(compute_dtype(e.dtype))


def _call(ev: _Evaluator, e: Call, mask: Value | None) -> Value:
    fn = CALLS.get(e.func)
    if fn is None:
        raise TEError(f"no numpy implementation of the math function {e.func!r}")
    out = fn(*(ev(a, mask) for a in e.args))
    return round_to(out, e.dtype) if e.dtype == "bfloat16" else out


def _load(ev: _Evaluator, e: Load, mask: Value | None) -> Value:
    indices = [np.asarray(ev(i, mask)) for i in e.indices]
    return from_storage(ev.load(e, indices, mask), e.dtype)


def _reduce(ev: _Evaluator, e: Reduce, mask: Value | None) -> Value:
    raise TEError(
        f"eval_expr does not evaluate reductions ({e!r}); autosched.task.evaluate handles them"
    )


HANDLERS: dict[type, Callable[[_Evaluator, Any, Any], Value]] = {
    Const: _const,
    Var: _var,
    IterVar: _var,
    BinOp: _binop,
    Not: _not,
    Select: _select,
    Cast: _cast,
    Call: _call,
    Load: _load,
    Reduce: _reduce,
}


def eval_expr(
    expr: Expr,
    env: dict[int, Value],
    load: LoadFn,
    mask: Value | None = None,
) -> Value:
    """Evaluate `expr` for all points at once.

    `env` maps `id(var)` to an array or int (arrays broadcast); `load(node, indices, mask)` reads
    `node.buffer` at the broadcast index arrays `indices` and returns the values; `mask` (a bool
    array or None for "everywhere") says where the value is needed. Returns an array or numpy
    scalar in the expression's dtype (integers may be widened to int64).
    """
    with np.errstate(all="ignore"):  # untaken Select sides may divide by zero, overflow, ...
        return _Evaluator(env, load)(expr, mask)


def gather(array: np.ndarray, indices: Sequence[Value], mask: Value | None, name: str) -> Value:
    """Read `array[indices]` with broadcast index arrays.

    Indices out of bounds are clipped where `mask` is False; where the mask is True (or there is
    no mask) they raise OutOfBoundsError naming `name` and the offending index.
    """
    if len(indices) != array.ndim:
        raise TEError(f"{name} has {array.ndim} dimensions but {len(indices)} indices were given")
    idx = [np.asarray(i) for i in indices]
    clipped = []
    for d, (i, extent) in enumerate(zip(idx, array.shape, strict=True)):
        bad = (i < 0) | (i >= extent)
        if bad.any():
            needed = bad if mask is None else np.logical_and(bad, mask)
            if needed.any():
                _raise_out_of_bounds(array, idx, needed, name, d)
            i = np.clip(i, 0, extent - 1)
        clipped.append(i)
    return array[tuple(clipped)]


def _raise_out_of_bounds(
    array: np.ndarray, idx: list[np.ndarray], needed: np.ndarray, name: str, dim: int
) -> None:
    shape = np.broadcast_shapes(needed.shape, *(i.shape for i in idx))
    first = int(np.flatnonzero(np.broadcast_to(needed, shape))[0])
    pos = np.unravel_index(first, shape)
    point = [int(np.broadcast_to(i, shape)[pos]) for i in idx]
    raise OutOfBoundsError(
        f"out-of-bounds read of {name}{list(point)} (dimension {dim} has extent "
        f"{array.shape[dim]}; shape {list(array.shape)})"
    )
