"""Numpy references of the topi operators, independent of the expression language.

Each computes in float64 and casts the result to the input's dtype. Convolutions loop over
kernel offsets in Python and contract the rest with einsum. Padding arguments follow the topi
conventions: an int, one int per spatial dim, all befores then all afters, "VALID" or "SAME".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np


def _ints(value: Any, n: int) -> tuple[int, ...]:
    return (value,) * n if isinstance(value, int) else tuple(value)


def _pads(padding: Any, dilated_kernel: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = len(dilated_kernel)
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return (0,) * n, (0,) * n
        total = [k - 1 for k in dilated_kernel]
        before = tuple((t + 1) // 2 for t in total)
        return before, tuple(t - b for t, b in zip(total, before, strict=True))
    vals = _ints(padding, n)
    return (vals, vals) if len(vals) == n else (vals[:n], vals[n:])


def _conv_nd(
    a: np.ndarray, w: np.ndarray, stride: Any, padding: Any, dilation: Any, groups: int
) -> np.ndarray:
    """N-d grouped convolution: a (N, C, *S), w (CO, C/groups, *K), float64 result."""
    nsp = a.ndim - 2
    strides, dils = _ints(stride, nsp), _ints(dilation, nsp)
    kernel = w.shape[2:]
    before, after = _pads(padding, [(k - 1) * d + 1 for k, d in zip(kernel, dils, strict=True)])
    ap = np.pad(a.astype(np.float64), [(0, 0), (0, 0)] + list(zip(before, after, strict=True)))
    out_sp = [
        (ap.shape[2 + i] - (kernel[i] - 1) * dils[i] - 1) // strides[i] + 1 for i in range(nsp)
    ]
    n, c = a.shape[:2]
    co = w.shape[0]
    ag = ap.reshape((n, groups, c // groups) + ap.shape[2:])
    wg = w.astype(np.float64).reshape((groups, co // groups, c // groups) + tuple(kernel))
    out = np.zeros((n, groups, co // groups) + tuple(out_sp))
    sp = "hwd"[:nsp]
    spec = f"ngc{sp},gfc->ngf{sp}"
    for offs in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(
            slice(o * d, o * d + s * (m - 1) + 1, s)
            for o, d, s, m in zip(offs, dils, strides, out_sp, strict=True)
        )
        out += np.einsum(spec, ag[(Ellipsis,) + sl], wg[(Ellipsis,) + offs])
    return out.reshape((n, co) + tuple(out_sp))


def conv2d_nchw_python(
    a_np: np.ndarray,
    w_np: np.ndarray,
    stride: Any,
    padding: Any,
    dilation: Any = 1,
    groups: int = 1,
) -> np.ndarray:
    """conv2d, data (N, C, H, W), kernel (CO, C/groups, KH, KW)."""
    return _conv_nd(a_np, w_np, stride, padding, dilation, groups).astype(a_np.dtype)


def conv2d_nhwc_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, dilation: Any = 1
) -> np.ndarray:
    """conv2d, data (N, H, W, C), kernel (KH, KW, CI, CO)."""
    out = _conv_nd(
        a_np.transpose(0, 3, 1, 2), w_np.transpose(3, 2, 0, 1), stride, padding, dilation, 1
    )
    return out.transpose(0, 2, 3, 1).astype(a_np.dtype)


def depthwise_conv2d_nchw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, dilation: Any = 1
) -> np.ndarray:
    """Depthwise conv2d, data (N, C, H, W), kernel (C, M, KH, KW); output channel c*M + m."""
    c, m, kh, kw = w_np.shape
    w = w_np.reshape(c * m, 1, kh, kw)
    return _conv_nd(a_np, w, stride, padding, dilation, c).astype(a_np.dtype)


def group_conv2d_nchw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, dilation: Any, groups: int
) -> np.ndarray:
    """Grouped conv2d, data (N, C, H, W), kernel (CO, C/groups, KH, KW)."""
    return _conv_nd(a_np, w_np, stride, padding, dilation, groups).astype(a_np.dtype)


def conv3d_ncdhw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, dilation: Any = 1
) -> np.ndarray:
    """conv3d, data (N, C, D, H, W), kernel (CO, C, KD, KH, KW)."""
    return _conv_nd(a_np, w_np, stride, padding, dilation, 1).astype(a_np.dtype)


def conv2d_transpose_nchw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, output_padding: Any = 0
) -> np.ndarray:
    """Transposed conv2d (the gradient of conv2d), data (N, CI, H, W), kernel (CI, CO, KH, KW).

    Scatters each input pixel times the kernel into the output, then crops the padding.
    """
    n, _, h, w = a_np.shape
    _, co, kh, kw = w_np.shape
    sh, sw = _ints(stride, 2)
    oph, opw = _ints(output_padding, 2)
    (pt, pl), (pb, pr) = _pads(padding, (kh, kw))
    a, k = a_np.astype(np.float64), w_np.astype(np.float64)
    full = np.zeros((n, co, (h - 1) * sh + kh + oph, (w - 1) * sw + kw + opw))
    for ky, kx in itertools.product(range(kh), range(kw)):
        full[:, :, ky : ky + (h - 1) * sh + 1 : sh, kx : kx + (w - 1) * sw + 1 : sw] += np.einsum(
            "nchw,co->nohw", a, k[:, :, ky, kx]
        )
    out = full[:, :, pt : full.shape[2] - pb, pl : full.shape[3] - pr]
    return out.astype(a_np.dtype)


def matmul(
    a: np.ndarray, b: np.ndarray, transpose_a: bool = False, transpose_b: bool = False
) -> np.ndarray:
    """A @ B with optional transposes."""
    x = a.astype(np.float64).T if transpose_a else a.astype(np.float64)
    y = b.astype(np.float64).T if transpose_b else b.astype(np.float64)
    return (x @ y).astype(a.dtype)


def dense(data: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """data (batch, in) @ weight (out, in).T (+ bias (out,))."""
    out = data.astype(np.float64) @ weight.astype(np.float64).T
    if bias is not None:
        out = out + bias.astype(np.float64)
    return out.astype(data.dtype)


def batch_matmul(
    x: np.ndarray, y: np.ndarray, transpose_a: bool = False, transpose_b: bool = True
) -> np.ndarray:
    """Batched A @ B; B is (batch, N, K) when transpose_b (TVM's default); batch 1 broadcasts."""
    a = x.astype(np.float64)
    b = y.astype(np.float64)
    a = a.transpose(0, 2, 1) if transpose_a else a
    b = b.transpose(0, 2, 1) if transpose_b else b
    return np.matmul(a, b).astype(x.dtype)


def bias_add(data: np.ndarray, bias: np.ndarray, axis: int = 1) -> np.ndarray:
    """data + bias along `axis`."""
    shape = [1] * data.ndim
    shape[axis] = bias.shape[0]
    return (data.astype(np.float64) + bias.astype(np.float64).reshape(shape)).astype(data.dtype)


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0)."""
    return np.maximum(x, np.zeros((), dtype=x.dtype))


def softmax_python(a_np: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along `axis`."""
    a = a_np.astype(np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(a_np.dtype)


def layer_norm_python(
    data: np.ndarray, gamma: np.ndarray, beta: np.ndarray, axis: Any, epsilon: float = 1e-5
) -> np.ndarray:
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over `axis` (biased variance)."""
    axes = tuple(sorted(a % data.ndim for a in _ints(axis, 1)))
    x = data.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    shape = [data.shape[d] if d in axes else 1 for d in range(data.ndim)]
    g = gamma.astype(np.float64).reshape(shape)
    b = beta.astype(np.float64).reshape(shape)
    return ((x - mean) / np.sqrt(var + epsilon) * g + b).astype(data.dtype)


def pool2d_python(
    a_np: np.ndarray,
    kernel: Any,
    stride: Any,
    padding: Any,
    pool_type: str,
    dilation: Any = 1,
    layout: str = "NCHW",
    count_include_pad: bool = True,
) -> np.ndarray:
    """Max or average pooling over the H and W dims named by `layout`."""
    hd, wd = layout.index("H"), layout.index("W")
    a = np.moveaxis(a_np.astype(np.float64), (hd, wd), (-2, -1))
    kh, kw = _ints(kernel, 2)
    sh, sw = _ints(stride, 2)
    dh, dw = _ints(dilation, 2)
    (pt, pl), (pb, pr) = _pads(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    pads = [(0, 0)] * (a.ndim - 2) + [(pt, pb), (pl, pr)]
    fill = -np.inf if pool_type == "max" else 0.0
    ap = np.pad(a, pads, constant_values=fill)
    ones = np.pad(np.ones(a.shape[-2:]), pads[-2:])
    oh = (ap.shape[-2] - (kh - 1) * dh - 1) // sh + 1
    ow = (ap.shape[-1] - (kw - 1) * dw - 1) // sw + 1
    acc = np.full(a.shape[:-2] + (oh, ow), fill)
    count = np.zeros((oh, ow))
    for ry, rx in itertools.product(range(kh), range(kw)):
        sl = (
            slice(ry * dh, ry * dh + sh * (oh - 1) + 1, sh),
            slice(rx * dw, rx * dw + sw * (ow - 1) + 1, sw),
        )
        win = ap[(Ellipsis,) + sl]
        acc = np.maximum(acc, win) if pool_type == "max" else acc + win
        count += ones[sl]
    if pool_type == "avg":
        acc = acc / (kh * kw if count_include_pad else count)
    return np.moveaxis(acc, (-2, -1), (hd, wd)).astype(a_np.dtype)


def norm2d_python(x: np.ndarray, keepdims: bool = False) -> np.ndarray:
    """sqrt of the sum of squares over the last two axes ((1,) for a 2-D x without keepdims)."""
    out = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=(-2, -1), keepdims=keepdims))
    if out.ndim == 0:
        out = out.reshape(1)
    return out.astype(x.dtype)


def attention_python(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    causal: bool = False,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """softmax(q k^T * scale + mask) v per batch-head, in float64: q (BH, Sq, D), k (BH, Skv,
    D), v (BH, Skv, Dv) as float values; `causal` masks key j of query i where
    j > i + Skv - Sq. A row masked everywhere gives 0 (PyTorch's safe softmax)."""
    s = np.einsum("bid,bjd->bij", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask.astype(np.float64)
    if causal:
        sq, skv = s.shape[1:]
        allowed = np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)
        s = np.where(allowed[None], s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isneginf(top), 0.0, top))
    total = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return np.einsum("bij,bje->bie", p, v.astype(np.float64))
