"""Transposed 2-D convolution, computed per output phase so that no multiply-add meets an
inserted zero.

TVM builds it as dilate (stride - 1 zeros between input pixels), pad, and a stride-1 convolution
with the flipped kernel: for stride 2, three multiply-adds in four read an inserted zero. Here
each output pixel sums only the taps that land on it. Output row y, shifted by the top padding
to Y = y + pad_top, receives input row i through kernel row ky exactly when i * stride + ky = Y,
so ky = Y mod stride + r * stride and i = Y div stride - r for r in [0, ceil(KH / stride)):
a reduction over ceil(KH / stride) taps, not KH (the same for columns). Input rows outside the
image read `data_pad`'s zeros, as a stride-1 convolution reads its padding; when KH is not a
multiple of the stride, the phases with fewer taps read `kernel_pad`'s zero rows.
"""

from __future__ import annotations

from typing import Any

from autosched import te
from autosched.te.dtype import check_dtype
from autosched.te.expr import Expr
from autosched.topi.pad import pad
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

    Output extent `(H - 1)*stride - pad_top - pad_bottom + KH + output_padding`; padding may be
    at most KH - 1 (KW - 1) per side. Stages: `data_pad` (input rows and columns that taps at
    the border reach, only when needed), `kernel_pad` (KH, KW rounded up to multiples of the
    stride, only when they are not), then the reduction over input channels and
    ceil(KH / stride) x ceil(KW / stride) taps.
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

    rows, cols = _Phases(h, kh, sh, pt, oh), _Phases(w, kw, sw, pl, ow)
    before, after = (0, 0, rows.pad_before, cols.pad_before), (0, 0, rows.pad_after, cols.pad_after)
    data_pad = data if not any(before + after) else pad(data, before, after, 0.0, "data_pad")
    grow = (0, 0, rows.kernel_pad, cols.kernel_pad)
    kernel_pad = kernel if not any(grow) else pad(kernel, (0,) * 4, grow, 0.0, "kernel_pad")
    dc = te.reduce_axis((0, ci), name="dc")
    dh = te.reduce_axis((0, rows.taps), name="dh")
    dw = te.reduce_axis((0, cols.taps), name="dw")
    return te.compute(
        (batch, co, oh, ow),
        lambda b, c, y, x: te.sum(
            cast_to(data_pad[b, dc, rows.input_index(y, dh), cols.input_index(x, dw)], out_dtype)
            * cast_to(
                kernel_pad[dc, c, rows.kernel_index(y, dh), cols.kernel_index(x, dw)], out_dtype
            ),
            axis=[dc, dh, dw],
        ),
        name="conv2d_transpose_nchw",
        tag="conv2d_transpose_nchw",
    )


class _Phases:
    """The index arithmetic of one spatial dimension (rows or columns) of a transposed
    convolution: extent `size`, kernel extent `k`, stride `s`, padding `p` before the output,
    output extent `out`. Tap t of output y (t counts up as the input index does):
    input `(y + p) div s - (taps - 1) + t`, kernel `(y + p) mod s + (taps - 1 - t) * s`."""

    def __init__(self, size: int, k: int, s: int, p: int, out: int) -> None:
        self.s, self.p = s, p
        self.taps = -(-k // s)
        self.kernel_pad = self.taps * s - k  # zero kernel rows of the phases with fewer taps
        first = p // s - (self.taps - 1)  # the lowest input index a tap reads
        last = (out - 1 + p) // s  # the highest
        self.pad_before = max(0, -first)
        self.pad_after = max(0, last - (size - 1))

    def input_index(self, y: Expr, t: Expr) -> Expr:
        """The index into the padded input of tap t of output y."""
        shift = self.pad_before - (self.taps - 1)
        if self.s == 1:
            return _plus(y, self.p + shift) + t
        return _plus(te.floordiv(_plus(y, self.p), self.s), shift) + t

    def kernel_index(self, y: Expr, t: Expr) -> Expr:
        """The index into the (padded) kernel of tap t of output y."""
        if self.s == 1:
            return (self.taps - 1) - t
        return te.floormod(_plus(y, self.p), self.s) + ((self.taps - 1) - t) * self.s


def _plus(e: Expr, c: int) -> Expr:
    """`e + c`, without a `+ 0` in the printed index."""
    return e + c if c else e
