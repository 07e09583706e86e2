"""2-D max and average pooling (NCHW by default; any layout naming its H and W dims)."""

from __future__ import annotations

from typing import Any

from autosched import te
from autosched.te.expr import Expr, const
from autosched.topi.pad import pad
from autosched.topi.utils import (
    as_tuple,
    ax_names,
    check,
    check_tensor,
    out_size,
    pad_tuple,
    window,
    with_axis_names,
)

POOL_TYPES = ("max", "avg")


def _valid_count(
    o: Expr, stride: int, before: int, kernel: int, dilation: int, extent: int
) -> Expr:
    """How many of the window's `kernel` taps at output `o` fall inside [0, extent)."""
    start = o * stride - before if stride != 1 else o - before
    if dilation == 1:
        lo, hi = te.max(0 - start, 0), te.min(extent - start, kernel)
    else:
        lo = te.max(te.floordiv(dilation - 1 - start, dilation), 0)
        hi = te.min(te.floordiv(extent - 1 - start, dilation) + 1, kernel)
    return te.max(hi - lo, 0)


def pool2d(
    data: te.Tensor,
    kernel: Any,
    stride: Any,
    dilation: Any,
    padding: Any,
    pool_type: str,
    ceil_mode: bool = False,
    layout: str = "NCHW",
    count_include_pad: bool = True,
) -> te.Tensor:
    """TVM's pool2d: `pool_max`, or `pool_sum` then `pool_avg` (ops over axes ax0, ...).

    Padding is (top, left, bottom, right) or anything `pad_tuple` takes; max pooling pads with
    the dtype's lowest value, average pooling with 0 and divides by the full window size
    (count_include_pad=True, TVM's default) or by the number of taps inside the input.
    """
    op = "pool2d"
    check_tensor(data, None, op, "data")
    check(
        pool_type in POOL_TYPES, f"{op}: pool_type must be one of {POOL_TYPES}, got {pool_type!r}"
    )
    check(not ceil_mode, f"{op}: ceil_mode=True is not supported")
    check(
        len(layout) == data.ndim and "H" in layout and "W" in layout,
        f"{op}: layout {layout!r} does not describe data of shape {list(data.shape)}",
    )
    dims = (layout.index("H"), layout.index("W"))
    kh, kw = as_tuple(kernel, 2, op, "kernel")
    strides = as_tuple(stride, 2, op, "stride")
    dilations = as_tuple(dilation, 2, op, "dilation")
    dilated = tuple((k - 1) * d + 1 for k, d in zip((kh, kw), dilations, strict=True))
    before, after = pad_tuple(padding, dilated, op)
    check(
        all(b < k and a < k for b, a, k in zip(before, after, dilated, strict=True)),
        f"{op}: padding {padding!r} must be smaller than the window {dilated}",
    )
    shape = list(data.shape)
    for dim, k, s, d, b, a in zip(dims, (kh, kw), strides, dilations, before, after, strict=True):
        shape[dim] = out_size(data.shape[dim], k, s, d, b + a, op)

    padded = data
    if any(before) or any(after):
        pb, pa = [0] * data.ndim, [0] * data.ndim
        for dim, b, a in zip(dims, before, after, strict=True):
            pb[dim], pa[dim] = b, a
        fill = te.min_value(data.dtype) if pool_type == "max" else 0.0
        padded = pad(data, pb, pa, fill, name="pad_temp")
    rv = (te.reduce_axis((0, kh), name="rv0"), te.reduce_axis((0, kw), name="rv1"))

    def source(*ax: Expr) -> Expr:
        idx = list(ax)
        for dim, r, s, d in zip(dims, rv, strides, dilations, strict=True):
            idx[dim] = window(ax[dim], s, r, d)
        return padded[tuple(idx)]

    names = ax_names(data.ndim)
    if pool_type == "max":
        body = with_axis_names(names, lambda *ax: te.max(source(*ax), axis=list(rv)))
        return te.compute(tuple(shape), body, name="pool_max", tag="pool_max")
    total = te.compute(
        tuple(shape),
        with_axis_names(names, lambda *ax: te.sum(source(*ax), axis=list(rv))),
        name="pool_sum",
        tag="pool_sum",
    )

    def average(*ax: Expr) -> Expr:
        if count_include_pad or not (any(before) or any(after)):
            return total[ax] / const(kh * kw, data.dtype)
        counts = [
            _valid_count(ax[dim], s, b, k, d, data.shape[dim])
            for dim, s, b, k, d in zip(dims, strides, before, (kh, kw), dilations, strict=True)
        ]
        return total[ax] / te.cast(counts[0] * counts[1], data.dtype)

    return te.compute(
        tuple(shape), with_axis_names(names, average), name="pool_avg", tag="elemwise"
    )


def max_pool2d(
    data: te.Tensor,
    kernel: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    layout: str = "NCHW",
) -> te.Tensor:
    """Max pooling; the stride defaults to the kernel size."""
    return pool2d(
        data, kernel, kernel if stride is None else stride, dilation, padding, "max", layout=layout
    )


def avg_pool2d(
    data: te.Tensor,
    kernel: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    layout: str = "NCHW",
    count_include_pad: bool = True,
) -> te.Tensor:
    """Average pooling; the stride defaults to the kernel size."""
    return pool2d(
        data,
        kernel,
        kernel if stride is None else stride,
        dilation,
        padding,
        "avg",
        layout=layout,
        count_include_pad=count_include_pad,
    )
