"""Convolutions: conv2d (NCHW, NHWC), depthwise, grouped, and conv3d (NCDHW).

Op names, tags and axis names follow TVM's topi. Padding goes through a separate `pad` stage
only when some side is actually padded; otherwise the convolution reads its input directly.
"""

from __future__ import annotations

from typing import Any

from autosched import te
from autosched.te.dtype import check_dtype
from autosched.topi.pad import pad
from autosched.topi.utils import as_tuple, cast_to, check, check_tensor, out_size, pad_tuple, window


def _spatial(
    op: str,
    data: te.Tensor,
    kernel_hw: tuple[int, ...],
    spatial_dims: tuple[int, ...],
    stride: Any,
    padding: Any,
    dilation: Any,
    pad_name: str,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], te.Tensor]:
    """Strides, dilations, output extents and the (maybe) padded input of a convolution."""
    n = len(kernel_hw)
    strides = as_tuple(stride, n, op, "stride")
    dilations = as_tuple(dilation, n, op, "dilation")
    dilated = tuple((k - 1) * d + 1 for k, d in zip(kernel_hw, dilations, strict=True))
    before, after = pad_tuple(padding, dilated, op)
    outs = tuple(
        out_size(data.shape[dim], k, s, d, b + a, op)
        for dim, k, s, d, b, a in zip(
            spatial_dims, kernel_hw, strides, dilations, before, after, strict=True
        )
    )
    padded = data
    if any(before) or any(after):
        pb, pa = [0] * data.ndim, [0] * data.ndim
        for dim, b, a in zip(spatial_dims, before, after, strict=True):
            pb[dim], pa[dim] = b, a
        padded = pad(data, pb, pa, 0.0, name=pad_name)
    return strides, dilations, outs, padded


def conv2d_nchw(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: Any,
    padding: Any,
    dilation: Any = 1,
    out_dtype: str = "float32",
) -> te.Tensor:
    """`conv2d_nchw(nn, ff, yy, xx)`: data (N, CI, H, W), kernel (CO, CI, KH, KW)."""
    op = "conv2d_nchw"
    check_tensor(data, 4, op, "data (N, C, H, W)")
    check_tensor(kernel, 4, op, "kernel (CO, CI, KH, KW)")
    out_dtype = check_dtype(out_dtype)
    batch, ci, _, _ = data.shape
    co, kci, kh, kw = kernel.shape
    check(ci == kci, f"{op}: data has {ci} input channels but the kernel expects {kci}")
    (sh, sw), (dh, dw), (oh, ow), padded = _spatial(
        op, data, (kh, kw), (2, 3), stride, padding, dilation, "pad_temp"
    )
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (batch, co, oh, ow),
        lambda nn, ff, yy, xx: te.sum(
            cast_to(padded[nn, rc, window(yy, sh, ry, dh), window(xx, sw, rx, dw)], out_dtype)
            * cast_to(kernel[ff, rc, ry, rx], out_dtype),
            axis=[rc, ry, rx],
        ),
        name="conv2d_nchw",
        tag="conv2d_nchw",
    )


def conv2d_nhwc(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: Any,
    padding: Any,
    dilation: Any = 1,
    out_dtype: str = "float32",
) -> te.Tensor:
    """`Conv2dOutput(nn, yy, xx, ff)`: data (N, H, W, CI), kernel (KH, KW, CI, CO) (HWIO)."""
    op = "conv2d_nhwc"
    check_tensor(data, 4, op, "data (N, H, W, C)")
    check_tensor(kernel, 4, op, "kernel (KH, KW, CI, CO)")
    out_dtype = check_dtype(out_dtype)
    batch, _, _, ci = data.shape
    kh, kw, kci, co = kernel.shape
    check(ci == kci, f"{op}: data has {ci} input channels but the kernel expects {kci}")
    (sh, sw), (dh, dw), (oh, ow), padded = _spatial(
        op, data, (kh, kw), (1, 2), stride, padding, dilation, "PaddedInput"
    )
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, ci), name="rc")
    return te.compute(
        (batch, oh, ow, co),
        lambda nn, yy, xx, ff: te.sum(
            cast_to(padded[nn, window(yy, sh, ry, dh), window(xx, sw, rx, dw), rc], out_dtype)
            * cast_to(kernel[ry, rx, rc, ff], out_dtype),
            axis=[ry, rx, rc],
        ),
        name="Conv2dOutput",
        tag="conv2d_nhwc",
    )


def depthwise_conv2d_nchw(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: Any,
    padding: Any,
    dilation: Any = 1,
    out_dtype: str = "float32",
) -> te.Tensor:
    """`DepthwiseConv2d(b, c, i, j)`: data (N, C, H, W), kernel (C, M, KH, KW); C*M outputs."""
    op = "depthwise_conv2d_nchw"
    check_tensor(data, 4, op, "data (N, C, H, W)")
    check_tensor(kernel, 4, op, "kernel (C, multiplier, KH, KW)")
    out_dtype = check_dtype(out_dtype)
    batch, c, _, _ = data.shape
    kc, mult, kh, kw = kernel.shape
    check(c == kc, f"{op}: data has {c} channels but the kernel has {kc}")
    (sh, sw), (dh, dw), (oh, ow), padded = _spatial(
        op, data, (kh, kw), (2, 3), stride, padding, dilation, "PaddedInput"
    )
    di = te.reduce_axis((0, kh), name="di")
    dj = te.reduce_axis((0, kw), name="dj")

    def fcompute(b: te.Expr, c: te.Expr, i: te.Expr, j: te.Expr) -> te.Expr:
        ic = c if mult == 1 else te.floordiv(c, mult)
        m = 0 if mult == 1 else te.floormod(c, mult)
        return te.sum(
            cast_to(padded[b, ic, window(i, sh, di, dh), window(j, sw, dj, dw)], out_dtype)
            * cast_to(kernel[ic, m, di, dj], out_dtype),
            axis=[di, dj],
        )

    return te.compute(
        (batch, c * mult, oh, ow), fcompute, name="DepthwiseConv2d", tag="depthwise_conv2d_nchw"
    )


def group_conv2d_nchw(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: Any,
    padding: Any,
    dilation: Any = 1,
    groups: int = 1,
    out_dtype: str = "float32",
) -> te.Tensor:
    """`group_conv2d_nchw(nn, ff, yy, xx)`: data (N, CI, H, W), kernel (CO, CI/groups, KH, KW)."""
    op = "group_conv2d_nchw"
    check_tensor(data, 4, op, "data (N, C, H, W)")
    check_tensor(kernel, 4, op, "kernel (CO, CI/groups, KH, KW)")
    out_dtype = check_dtype(out_dtype)
    batch, ci, _, _ = data.shape
    co, kci, kh, kw = kernel.shape
    check(isinstance(groups, int) and groups >= 1, f"{op}: groups must be a positive int")
    check(
        ci % groups == 0 and co % groups == 0,
        f"{op}: {ci} input and {co} output channels must both divide into {groups} groups",
    )
    check(
        kci * groups == ci,
        f"{op}: the kernel has {kci} channels per group but data has {ci} / {groups} groups",
    )
    (sh, sw), (dh, dw), (oh, ow), padded = _spatial(
        op, data, (kh, kw), (2, 3), stride, padding, dilation, "pad_temp"
    )
    rc = te.reduce_axis((0, kci), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    per_group = co // groups

    def fcompute(nn: te.Expr, ff: te.Expr, yy: te.Expr, xx: te.Expr) -> te.Expr:
        channel = rc if groups == 1 else te.floordiv(ff, per_group) * kci + rc
        return te.sum(
            cast_to(padded[nn, channel, window(yy, sh, ry, dh), window(xx, sw, rx, dw)], out_dtype)
            * cast_to(kernel[ff, rc, ry, rx], out_dtype),
            axis=[rc, ry, rx],
        )

    return te.compute(
        (batch, co, oh, ow), fcompute, name="group_conv2d_nchw", tag="group_conv2d_nchw"
    )


def conv3d_ncdhw(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: Any,
    padding: Any,
    dilation: Any = 1,
    out_dtype: str = "float32",
) -> te.Tensor:
    """`conv3d_ncdhw(nn, ff, zz, yy, xx)`: data (N, CI, D, H, W), kernel (CO, CI, KD, KH, KW)."""
    op = "conv3d_ncdhw"
    check_tensor(data, 5, op, "data (N, C, D, H, W)")
    check_tensor(kernel, 5, op, "kernel (CO, CI, KD, KH, KW)")
    out_dtype = check_dtype(out_dtype)
    batch, ci = data.shape[:2]
    co, kci, kd, kh, kw = kernel.shape
    check(ci == kci, f"{op}: data has {ci} input channels but the kernel expects {kci}")
    (sd, sh, sw), (dd, dh, dw), (od, oh, ow), padded = _spatial(
        op, data, (kd, kh, kw), (2, 3, 4), stride, padding, dilation, "pad_temp"
    )
    rc = te.reduce_axis((0, ci), name="rc")
    rz = te.reduce_axis((0, kd), name="rz")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (batch, co, od, oh, ow),
        lambda nn, ff, zz, yy, xx: te.sum(
            cast_to(
                padded[
                    nn, rc, window(zz, sd, rz, dd), window(yy, sh, ry, dh), window(xx, sw, rx, dw)
                ],
                out_dtype,
            )
            * cast_to(kernel[ff, rc, rz, ry, rx], out_dtype),
            axis=[rc, rz, ry, rx],
        ),
        name="conv3d_ncdhw",
        tag="conv3d_ncdhw",
    )
