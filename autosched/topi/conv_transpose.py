"""Transposed 2-D convolution, built as TVM builds it: dilate, pad, convolve, flipped kernel."""

from __future__ import annotations

from typing import Any

from autosched import te
from autosched.te.dtype import check_dtype
from autosched.topi.pad import dilate, pad
from autosched.topi.utils import as_tuple, cast_to, check, check_tensor, pad_tuple


def conv2d_transpose_nchw(
    data: te.Tensor,
    kernel: te.Tensor,
    stride: Any,
    padding: Any,
    out_dtype: str = "float32",
    output_padding: Any = 0,
) -> te.Tensor:
    """`conv2d_transpose_nchw(b, c, h, w)`: data (N, CI, H, W), kernel (CI, CO, KH, KW).

    Output extent `(H - 1)*stride - pad_top - pad_bottom + KH + output_padding`. Stages:
    `data_dilate` (only for stride > 1), `data_pad` (only when needed), `kernel_transform`
    (the kernel flipped and transposed to (CO, CI, KH, KW)), then the stride-1 convolution.
    Padding may be at most KH - 1 (KW - 1) per side.
    """
    op = "conv2d_transpose_nchw"
    check_tensor(data, 4, op, "data (N, CI, H, W)")
    check_tensor(kernel, 4, op, "kernel (CI, CO, KH, KW)")
    out_dtype = check_dtype(out_dtype)
    batch, ci, h, w = data.shape
    kci, co, kh, kw = kernel.shape
    check(ci == kci, f"{op}: data has {ci} input channels but the kernel has {kci}")
    sh, sw = as_tuple(stride, 2, op, "stride")
    oph, opw = (output_padding,) * 2 if isinstance(output_padding, int) else tuple(output_padding)
    check(
        0 <= oph < sh and 0 <= opw < sw,
        f"{op}: output_padding {output_padding!r} must be smaller than the stride {stride!r}",
    )
    (pt, pl), (pb, pr) = pad_tuple(padding, (kh, kw), op)
    check(
        max(pt, pb) <= kh - 1 and max(pl, pr) <= kw - 1,
        f"{op}: padding {padding!r} must be at most kernel size - 1 ({kh - 1}, {kw - 1})",
    )
    oh = (h - 1) * sh - pt - pb + kh + oph
    ow = (w - 1) * sw - pl - pr + kw + opw
    check(oh > 0 and ow > 0, f"{op}: the output would be empty ({oh} x {ow})")

    dilated = data if (sh, sw) == (1, 1) else dilate(data, (1, 1, sh, sw), name="data_dilate")
    before = (0, 0, kh - 1 - pt, kw - 1 - pl)
    after = (0, 0, kh - 1 - pb + oph, kw - 1 - pr + opw)
    padded = dilated if not any(before + after) else pad(dilated, before, after, 0.0, "data_pad")
    flipped = te.compute(
        (co, ci, kh, kw),
        lambda o, i, hh, ww: kernel[i, o, kh - 1 - hh, kw - 1 - ww],
        name="kernel_transform",
        tag="injective",
    )
    dc = te.reduce_axis((0, ci), name="dc")
    dh = te.reduce_axis((0, kh), name="dh")
    dw = te.reduce_axis((0, kw), name="dw")
    return te.compute(
        (batch, co, oh, ow),
        lambda b, c, hh, ww: te.sum(
            cast_to(padded[b, dc, hh + dh, ww + dw], out_dtype)
            * cast_to(flipped[c, dc, dh, dw], out_dtype),
            axis=[dc, dh, dw],
        ),
        name="conv2d_transpose_nchw",
        tag="conv2d_transpose_nchw",
    )
