"""Constant padding and dilation (zero insertion) of tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autosched import te
from autosched.te.dtype import is_float
from autosched.te.expr import Expr, as_expr
from autosched.topi.utils import check, check_tensor


def _fill(value: Any, dtype: str) -> Expr:
    """The fill literal in `dtype`; a whole float (the 0.0 default) also fills integer tensors."""
    if isinstance(value, float) and not is_float(dtype) and value.is_integer():
        value = int(value)
    return as_expr(value, dtype)


def pad(
    data: te.Tensor,
    pad_before: Sequence[int],
    pad_after: Sequence[int] | None = None,
    pad_value: Any = 0.0,
    name: str = "pad_temp",
) -> te.Tensor:
    """`data` padded with `pad_value`: `if_then_else(in bounds, data[i - before], pad_value)`.

    The condition has terms only for padded sides, joined left to right with `&&`, e.g.
    `((((i2 >= 1) && (i2 < 8)) && (i3 >= 1)) && (i3 < 8))`. `pad_after` defaults to `pad_before`.
    """
    check_tensor(data, None, "pad", "data")
    before = tuple(pad_before)
    after = before if pad_after is None else tuple(pad_after)
    check(
        len(before) == data.ndim and len(after) == data.ndim,
        f"pad: pad_before/pad_after need {data.ndim} entries (the rank of {data.name}), "
        f"got {list(before)} and {list(after)}",
    )
    check(
        all(isinstance(p, int) and p >= 0 for p in before + after),
        f"pad: paddings must be non-negative ints, got {list(before)} and {list(after)}",
    )
    value = _fill(pad_value, data.dtype)
    check(value.dtype == data.dtype, f"pad: pad_value {value!r} is not {data.dtype}")
    shape = tuple(d + b + a for d, b, a in zip(data.shape, before, after, strict=True))

    def fcompute(*i: Expr) -> Expr:
        index, conds = [], []
        for ax, extent, b, a in zip(i, data.shape, before, after, strict=True):
            index.append(ax - b if b else ax)
            if b:
                conds.append(ax >= b)
            if a:
                conds.append(ax < extent + b)
        if not conds:
            return data[tuple(index)]
        return te.if_then_else(te.all(*conds), data[tuple(index)], value)

    return te.compute(shape, fcompute, name=name, tag="injective,pad")


def dilate(
    data: te.Tensor, strides: Sequence[int], dilation_value: Any = 0.0, name: str = "DilatedInput"
) -> te.Tensor:
    """Insert `stride - 1` copies of `dilation_value` between neighbours along each dim (TVM's)."""
    check_tensor(data, None, "dilate", "data")
    strides = tuple(strides)
    check(
        len(strides) == data.ndim and all(isinstance(s, int) and s >= 1 for s in strides),
        f"dilate: strides must be {data.ndim} positive ints, got {list(strides)}",
    )
    value = _fill(dilation_value, data.dtype)
    shape = tuple((d - 1) * s + 1 for d, s in zip(data.shape, strides, strict=True))

    def fcompute(*i: Expr) -> Expr:
        index = [ax if s == 1 else te.floordiv(ax, s) for ax, s in zip(i, strides, strict=True)]
        conds = [te.floormod(ax, s) == 0 for ax, s in zip(i, strides, strict=True) if s != 1]
        if not conds:
            return data[tuple(index)]
        return te.if_then_else(te.all(*conds), data[tuple(index)], value)

    return te.compute(shape, fcompute, name=name, tag="injective,dilate")
