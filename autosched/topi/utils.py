"""Small helpers shared by the operators: argument checks, padding tuples, window indices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autosched import te
from autosched.errors import TEError
from autosched.te.expr import Expr
from autosched.te.tensor import ax_names, with_axis_names  # noqa: F401  (used by the operators)


def check(cond: bool, msg: str) -> None:
    """Raise TEError(msg) unless `cond` holds."""
    if not cond:
        raise TEError(msg)


def check_tensor(x: Any, ndim: int | None, op: str, what: str) -> None:
    """`x` must be a te.Tensor (of rank `ndim` when given); `what` describes it for the error."""
    check(isinstance(x, te.Tensor), f"{op}: {what} must be a te.Tensor, got {x!r}")
    if ndim is not None:
        check(
            x.ndim == ndim,
            f"{op}: {what} must have {ndim} dimensions, got shape {list(x.shape)}",
        )


def as_tuple(value: Any, n: int, op: str, what: str) -> tuple[int, ...]:
    """An int repeated `n` times, or a sequence of `n` positive ints."""
    vals = (value,) * n if isinstance(value, int) else tuple(value)
    check(
        len(vals) == n and all(isinstance(v, int) and not isinstance(v, bool) for v in vals),
        f"{op}: {what} must be an int or {n} ints, got {value!r}",
    )
    check(all(v > 0 for v in vals), f"{op}: {what} must be positive, got {value!r}")
    return vals


def pad_tuple(
    padding: Any, kernel: Sequence[int], op: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(before, after) padding per spatial dim, like TVM's get_pad_tuple.

    `padding` is an int, one int per dim, 2 ints per dim (all befores, then all afters: TVM's
    (top, left, bottom, right) for 2-D), "VALID", or "SAME" (for stride 1; `kernel` holds the
    dilated kernel extents).
    """
    n = len(kernel)
    if isinstance(padding, str):
        check(padding.upper() in ("SAME", "VALID"), f"{op}: unknown padding {padding!r}")
        if padding.upper() == "VALID":
            return (0,) * n, (0,) * n
        total = [k - 1 for k in kernel]
        before = tuple((t + 1) // 2 for t in total)
        return before, tuple(t - b for t, b in zip(total, before, strict=True))
    vals = (padding,) * n if isinstance(padding, int) else tuple(padding)
    check(
        len(vals) in (n, 2 * n) and all(isinstance(v, int) and v >= 0 for v in vals),
        f"{op}: padding must be an int, {n} or {2 * n} non-negative ints, got {padding!r}",
    )
    if len(vals) == n:
        return vals, vals
    return vals[:n], vals[n:]


def out_size(extent: int, kernel: int, stride: int, dilation: int, pad: int, op: str) -> int:
    """Output extent of a sliding window (`pad` = before + after); raises if not positive."""
    dilated = (kernel - 1) * dilation + 1
    size = (extent + pad - dilated) // stride + 1
    check(
        size > 0,
        f"{op}: the window ({kernel} wide, dilation {dilation}) does not fit in the padded "
        f"input ({extent} + {pad} padding)",
    )
    return size


def window(o: Expr, stride: int, r: Expr, dilation: int) -> Expr:
    """`o*stride + r*dilation`, without multiplying by 1 (prints as `(yy + ry)`)."""
    a = o if stride == 1 else o * stride
    b = r if dilation == 1 else r * dilation
    return a + b


def cast_to(e: Expr, dtype: str) -> Expr:
    """`e` converted to `dtype` (no Cast node when it already has that dtype)."""
    return e if e.dtype == dtype else te.cast(e, dtype)


def normalize_axes(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    """Axis or axes (negative counts from the end) as sorted, distinct non-negative ints."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        check(isinstance(a, int) and -ndim <= a < ndim, f"{op}: axis {a!r} out of range")
        out.append(a % ndim)
    check(len(set(out)) == len(out), f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))
