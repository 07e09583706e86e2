"""Naive numpy evaluation of a compute DAG: the reference every schedule is checked against.

Each compute op is evaluated over its whole iteration space at once: spatial axis `d` is a
broadcast index array of shape (1, .., extent, .., 1) and reduce axes are extra trailing
dimensions that the reducer folds away. Float sums accumulate in float64 (integer sums in int64)
and are cast to the op's dtype at the end. float16 and bfloat16 tensors are stored as
`autosched.te.dtype.numpy_dtype` says (bfloat16 as uint16 bit patterns) and computed as
`compute_dtype` says. Iteration spaces larger than `max_block_elems` are
evaluated in chunks (over the outermost reduce axis, and over the first spatial axis when one
reduce step alone is too large), so memory stays bounded.

A sum of a product of loads whose indices are affine in the axes (matmul, dense, batch matmul,
conv2d, depthwise conv2d) is evaluated by `np.einsum` over strided views of the float64 inputs
instead, which contracts through BLAS, so the references of full-size suite workloads stay cheap
enough to check every schedule against.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from autosched.errors import AutoschedError, TEError
from autosched.lower.arith import to_affine
from autosched.te.dtype import (
    compute_dtype,
    from_storage,
    is_float,
    is_int,
    numpy_dtype,
    to_storage,
)
from autosched.te.expr import BinOp, Cast, Expr, IterVar, Load, Reduce, Var
from autosched.te.npeval import eval_expr, gather
from autosched.te.reduce import max_reducer, min_reducer, sum_reducer
from autosched.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, topological_ops

MAX_BLOCK_ELEMS = 1 << 22  # points (spatial x reduce) evaluated at once


class MissingInputError(AutoschedError, KeyError):
    """An input array for a placeholder was not given."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class InputMismatchError(AutoschedError, ValueError):
    """An input array has the wrong shape or dtype for its placeholder."""


# ---- the DAG ---------------------------------------------------------------------------------


def _flatten(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, Operation):
        return [x.output(0)]
    if hasattr(x, "tensors") and not isinstance(x, (list, tuple)):  # a ComputeDAG, say
        return _flatten(list(x.tensors))
    if isinstance(x, Iterable) and not isinstance(x, (str, bytes)):
        return [t for item in x for t in _flatten(item)]
    raise TEError(f"evaluate: expected tensors, got {x!r} ({type(x).__name__})")


def topo_ops(outputs: Any) -> list[Operation]:
    """Every op reachable from `outputs` (tensors, ops, or lists of them), producers first.

    The order is a depth-first post-order from the compute outputs (each op's inputs in the
    order it reads them), as TVM prints a DAG; given placeholders nobody reads come last.
    """
    roots = _flatten(outputs)
    roots.sort(key=lambda t: isinstance(t.op, PlaceholderOp))  # stable: computes first
    return topological_ops([t.op for t in roots])


# ---- reducers --------------------------------------------------------------------------------


def _acc_dtype(reducer: Any, dtype: str) -> np.dtype:
    """Sums accumulate in float64 / int64; everything else in the op's dtype."""
    if reducer is sum_reducer and is_float(dtype):
        return np.dtype(np.float64)
    if reducer is sum_reducer and (is_int(dtype) or dtype == "bool"):
        return np.dtype(np.int64)
    return compute_dtype(dtype)


# reducer -> (reduce an array over axes, combine two partial results)
NUMPY_REDUCERS: dict[Any, tuple[Callable, Callable]] = {
    sum_reducer: (lambda a, axes: np.sum(a, axis=axes), np.add),
    max_reducer: (lambda a, axes: np.max(a, axis=axes), np.maximum),
    min_reducer: (lambda a, axes: np.min(a, axis=axes), np.minimum),
}


def _custom_combiner(reducer: Any, dtype: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    x, y = Var("x", dtype), Var("y", dtype)
    expr = reducer.combine(x, y)
    np_dtype = compute_dtype(dtype)

    def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = eval_expr(expr, {id(x): a, id(y): b}, _no_load)
        return np.asarray(out).astype(np_dtype, copy=False)

    return combine


def _no_load(node: Load, indices: list, mask: Any) -> Any:
    raise TEError(f"a reducer's combine expression may not read tensors ({node!r})")


def _reducer_ops(reducer: Any, dtype: str) -> tuple[Callable, Callable]:
    """(reduce over axes, combine partials) for `reducer`; custom reducers fold elementwise."""
    if reducer in NUMPY_REDUCERS:
        return NUMPY_REDUCERS[reducer]
    combine = _custom_combiner(reducer, dtype)
    identity = compute_dtype(dtype).type(reducer.identity(dtype).value)

    def fold(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        keep = a.shape[: axes[0]]
        flat: np.ndarray = a.reshape(keep + (-1,))  # numpy's stubs misread this shape
        acc = np.full(keep, identity, dtype=compute_dtype(dtype))
        for k in range(flat.shape[-1]):
            acc = combine(acc, flat[..., k])
        return acc

    return fold, combine


# ---- one compute op --------------------------------------------------------------------------


def _bind(axes: Iterable, ranges: list[tuple[int, int]], first_dim: int, ndim: int) -> dict:
    env = {}
    for k, (ax, (lo, hi)) in enumerate(zip(axes, ranges, strict=True)):
        shape = [1] * ndim
        shape[first_dim + k] = hi - lo
        env[id(ax)] = np.arange(ax.lo + lo, ax.lo + hi, dtype=np.int64).reshape(shape)
    return env


def _eval_block(op: ComputeOp, s_ranges: list, r_ranges: list, load: Callable) -> np.ndarray:
    """The op's values over a block of its spatial space, reduced over a block of reduce space."""
    body, nd, nr = op.body, len(op.axis), len(op.reduce_axis)
    env = _bind(op.axis, s_ranges, 0, nd + nr)
    env.update(_bind(op.reduce_axis, r_ranges, nd, nd + nr))
    s_shape = tuple(hi - lo for lo, hi in s_ranges)
    if not isinstance(body, Reduce):
        value = np.asarray(eval_expr(body, env, load))
        return np.broadcast_to(value, s_shape)
    cond = None
    if body.condition is not None:
        cond = np.asarray(eval_expr(body.condition, env, load), dtype=bool)
    src = np.asarray(eval_expr(body.source, env, load, mask=cond))
    acc = _acc_dtype(body.reducer, op.dtype)
    if cond is not None:
        identity = compute_dtype(op.dtype).type(body.identity.value)
        src = np.where(cond, src, identity)
    full = s_shape + tuple(hi - lo for lo, hi in r_ranges)
    src = np.broadcast_to(src.astype(acc, copy=False), full)
    reduce, _ = _reducer_ops(body.reducer, op.dtype)
    return np.asarray(reduce(src, tuple(range(nd, nd + nr))))


def _product_loads(e: Expr) -> list[Load] | None:
    """The loads of a product of loads (float casts around them allowed), else None."""
    if isinstance(e, Cast) and is_float(e.dtype):
        return _product_loads(e.value)
    if isinstance(e, Load):
        return [e]
    if isinstance(e, BinOp) and e.op == "*":
        a, b = _product_loads(e.a), _product_loads(e.b)
        return a + b if a is not None and b is not None else None
    return None


def _strided_view(
    arr: np.ndarray, indices: Sequence[Expr], axes: list[IterVar]
) -> tuple[np.ndarray, list[int]] | None:
    """A view of `arr` with one dimension per axis the indices use (in `axes` order) such that
    view[t...] == arr[indices at axis values lo + t], and those axes' positions; None when an
    index is not affine in the axes or leaves the array."""
    position = {id(ax): k for k, ax in enumerate(axes)}
    offset = 0
    strides: dict[int, int] = {}  # axis position -> byte stride of the view
    for dim, (index, size) in enumerate(zip(indices, arr.shape, strict=True)):
        aff = to_affine(index, {})
        start, low, high = aff.const, 0, 0  # the index at every axis's first value; its reach
        for coef, atom in aff.terms.values():
            k = position.get(id(atom))
            if k is None:
                return None
            start += coef * axes[k].lo
            reach = coef * (axes[k].extent - 1)
            low, high = low + min(0, reach), high + max(0, reach)
            strides[k] = strides.get(k, 0) + coef * arr.strides[dim]
        if start + low < 0 or start + high >= size:
            return None
        offset += start * arr.strides[dim]
    used = sorted(strides)
    base = arr.reshape(-1)[offset // arr.itemsize :]
    view = np.lib.stride_tricks.as_strided(
        base,
        shape=[axes[k].extent for k in used],
        strides=[strides[k] for k in used],
        writeable=False,
    )
    return view, used


def _eval_contraction(op: ComputeOp, arrays: dict) -> np.ndarray | None:
    """`op` by np.einsum when it is a float sum of a product of loads with affine indices (no
    condition) and every axis appears in some load; None otherwise."""
    body = op.body
    if not (
        isinstance(body, Reduce)
        and body.reducer is sum_reducer
        and body.condition is None
        and is_float(op.dtype)
    ):
        return None
    loads = _product_loads(body.source)
    axes = list(op.axis) + list(op.reduce_axis)
    if not loads or len(axes) > 52 or any(ld.buffer.op not in arrays for ld in loads):
        return None
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    operands, subscripts, seen = [], [], set()
    for ld in loads:
        values = from_storage(arrays[ld.buffer.op], ld.buffer.dtype)
        got = _strided_view(np.ascontiguousarray(values, dtype=np.float64), ld.indices, axes)
        if got is None:
            return None
        operands.append(got[0])
        subscripts.append("".join(letters[k] for k in got[1]))
        seen.update(got[1])
    if len(seen) < len(axes):
        return None
    spec = ",".join(subscripts) + "->" + letters[: len(op.axis)]
    return to_storage(np.einsum(spec, *operands, optimize=True), op.dtype)


def _chunks(extent: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, extent)) for lo in range(0, extent, size)]


def _eval_compute(op: ComputeOp, load: Callable, limit: int) -> np.ndarray:
    shape = op.shape
    r_ext = [a.extent for a in op.reduce_axis]
    total = math.prod(shape) * math.prod(r_ext)
    full_s = [(0, e) for e in shape]
    full_r = [(0, e) for e in r_ext]
    if total <= limit:
        return to_storage(np.array(_eval_block(op, full_s, full_r, load)), op.dtype)
    # Chunk the outermost reduce axis so that a block holds about `limit` points; when one index
    # of it is already too many points (or there is no reduction), chunk the first spatial axis.
    r_step = total // r_ext[0] if r_ext else total
    r_blocks = (
        [[rb] + full_r[1:] for rb in _chunks(r_ext[0], max(1, limit // r_step))] if r_ext else []
    )
    s_blocks: list[tuple[int, int] | None]
    if not shape:
        s_blocks = [None]
    elif r_step > limit:
        s_blocks = list(_chunks(shape[0], max(1, limit // (r_step // shape[0]))))
    else:
        s_blocks = [(0, shape[0])]
    # a compute has reduce axes exactly when its body is a Reduce
    body = op.body
    combine = _reducer_ops(body.reducer, op.dtype)[1] if isinstance(body, Reduce) else None
    out = np.empty(shape, dtype=compute_dtype(op.dtype))
    for sb in s_blocks:
        s_ranges = ([sb] + full_s[1:]) if sb is not None else []
        if combine is None:
            partial = _eval_block(op, s_ranges, [], load)
        else:  # fold the reduce blocks' partial results in order
            parts = (_eval_block(op, s_ranges, r_ranges, load) for r_ranges in r_blocks)
            partial = functools.reduce(combine, parts)
        if sb is None:
            out[...] = partial
        else:
            out[sb[0] : sb[1]] = partial
    return to_storage(out, op.dtype)


# ---- the whole DAG ---------------------------------------------------------------------------


def _check_input(op: PlaceholderOp, inputs: dict[str, Any]) -> np.ndarray:
    if op.name not in inputs:
        given = ", ".join(sorted(inputs)) or "none"
        raise MissingInputError(
            f"no input array for placeholder {op.name!r} (shape {list(op.shape)}, {op.dtype}); "
            f"inputs given: {given}"
        )
    arr = np.asarray(inputs[op.name])
    if arr.shape != tuple(op.shape):
        raise InputMismatchError(
            f"input {op.name!r} has shape {list(arr.shape)} but the placeholder has shape "
            f"{list(op.shape)}"
        )
    if arr.dtype != numpy_dtype(op.dtype):
        raise InputMismatchError(
            f"input {op.name!r} has dtype {arr.dtype} but the placeholder has dtype {op.dtype}"
        )
    return arr


def evaluate_ops(
    outputs: Any,
    inputs: dict[str, Any],
    max_block_elems: int = MAX_BLOCK_ELEMS,
    contractions: bool = True,
) -> dict[Operation, np.ndarray]:
    """The value of every op reachable from `outputs` (placeholders included), keyed by op.
    `contractions=False` evaluates every op elementwise (no einsum path)."""
    arrays: dict[Operation, np.ndarray] = {}
    placeholder_names: dict[str, Operation] = {}

    def load(node: Load, indices: list, mask: Any) -> Any:
        buf = node.buffer
        if not isinstance(buf, Tensor) or buf.op not in arrays:
            raise TEError(f"evaluate: {node!r} reads a buffer that is not an evaluated tensor")
        return gather(arrays[buf.op], indices, mask, buf.name)

    for op in topo_ops(outputs):
        if isinstance(op, PlaceholderOp):
            other = placeholder_names.setdefault(op.name, op)
            if other is not op:
                raise TEError(f"evaluate: two different placeholders are named {op.name!r}")
            arrays[op] = _check_input(op, inputs)
        elif isinstance(op, ComputeOp):
            fast = _eval_contraction(op, arrays) if contractions else None
            arrays[op] = fast if fast is not None else _eval_compute(op, load, max_block_elems)
        else:
            raise TEError(f"evaluate: cannot evaluate operation {op!r}")
    return arrays


def evaluate(
    tensors_or_outputs: Any,
    inputs: dict[str, Any],
    max_block_elems: int = MAX_BLOCK_ELEMS,
    contractions: bool = True,
) -> dict[str, np.ndarray]:
    """Evaluate every compute op reachable from the given tensors with numpy.

    `tensors_or_outputs` is a tensor, an op, or a list of them (placeholders may be among them,
    as in a workload's `[data, kernel, out]`); `inputs` maps placeholder names to arrays of the
    exact shape and dtype. Returns `{op name: array}` for every compute op, outputs included;
    a name used by several ops gets `.1`, `.2`, ... appended in topological order.
    """
    out: dict[str, np.ndarray] = {}
    for op, arr in evaluate_ops(tensors_or_outputs, inputs, max_block_elems, contractions).items():
        if isinstance(op, ComputeOp):
            name, k = op.name, 0
            while name in out:
                k += 1
                name = f"{op.name}.{k}"
            out[name] = arr
    return out
