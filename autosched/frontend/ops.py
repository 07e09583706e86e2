"""ATen operators as anchor specs: a registered table keyed by the operator overload
(`torch.ops.aten.conv2d.default`); the epilogues' table, in `epilogues`, uses the same keys, and
`attention` adds scaled_dot_product_attention when fused attention is available.

An anchor matcher turns a node into an `Anchor` (or None when its arguments are outside what our
topi covers: the node then stays in PyTorch). Matchers read arguments by name
(`graph.args_of`), with the schema's defaults filled in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from autosched.frontend.graph import (
    TE_DTYPES,
    args_of,
    constant,
    operand,
    register,
    shape_of,
    target_key,
)
from autosched.frontend.specs import Anchor, Operand

aten = torch.ops.aten

ANCHORS: dict[Any, Callable] = {}


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _bias(b: Any, gm: fx.GraphModule) -> list[Operand] | None:
    """[the bias operand], [] without one, None when it is not usable."""
    if b is None:
        return []
    bias = operand("bias", b, gm)
    return None if bias is None else [bias]


# ---- convolutions ----------------------------------------------------------------------------


def _conv(node, gm, a: dict) -> Anchor | None:
    """A 2-D convolution's anchor from its ATen arguments `a` (aten.conv2d's names, which
    aten.convolution shares)."""
    x, w, b, stride, padding = a["input"], a["weight"], a["bias"], a["stride"], a["padding"]
    dilation, groups = a["dilation"], a["groups"]
    xs, out = shape_of(x), shape_of(node)
    data = operand("data", x, gm)
    weight = operand("weight", w, gm)
    if data is None or weight is None or out is None or xs is None or len(xs) != 4:
        return None
    co, _, kh, kw = weight.shape
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same" and kh % 2 and kw % 2:
            d = _pair(dilation)
            padding = (d[0] * (kh - 1) // 2, d[1] * (kw - 1) // 2)
        else:
            return None
    attrs: dict = {"stride": _pair(stride), "padding": _pair(padding), "dilation": _pair(dilation)}
    ci = xs[1]
    if groups == 1:
        kind = "conv2d"
    elif groups == ci and co % ci == 0:
        kind = "depthwise_conv2d"
        weight.shape = (ci, co // ci, kh, kw)
    else:
        kind, attrs["groups"] = "group_conv2d", groups
    bias = _bias(b, gm)
    if bias is None:
        return None
    return Anchor(kind, attrs, [data, weight, *bias], out)


@register(ANCHORS, aten.conv2d.default, aten.conv2d.padding)
def _conv2d(node, gm):
    return _conv(node, gm, args_of(node))


@register(ANCHORS, aten.convolution.default)
def _convolution(node, gm):
    a = args_of(node)
    if a["transposed"] or len(a["stride"]) != 2:
        return None
    return _conv(node, gm, a)


# ---- matrix products -------------------------------------------------------------------------


def _dense(node, gm, x, weight: Operand | None, b) -> Anchor | None:
    """`x @ weight^T (+ bias)` over x's flattened leading axes."""
    xs, out = shape_of(x), shape_of(node)
    if xs is None or out is None or len(xs) < 2 or weight is None or len(weight.shape) != 2:
        return None
    rows = math.prod(xs[:-1])
    data = operand("data", x, gm, (rows, xs[-1]))
    bias = _bias(b, gm)
    if data is None or bias is None:
        return None
    return Anchor("dense", {}, [data, weight, *bias], (rows, weight.shape[0]))


@register(ANCHORS, aten.linear.default)
def _linear(node, gm):
    a = args_of(node)
    return _dense(node, gm, a["input"], operand("weight", a["weight"], gm), a["bias"])


@register(ANCHORS, aten.addmm.default)
def _addmm(node, gm):
    """`bias + mat1 @ mat2` (Hugging Face's Conv1D): with a constant mat2, a dense layer on its
    transpose (the same task as the equivalent linear); otherwise a matmul plus bias."""
    a = args_of(node)
    if a["beta"] != 1 or a["alpha"] != 1:
        return None
    bias = shape_of(a["input"])
    out = shape_of(node)
    if bias is None or out is None or len(bias) != 1:
        return None
    w = constant(a["mat2"], gm)
    if w is not None and w.dtype in (torch.float32, torch.float16, torch.bfloat16):
        weight = Operand("weight", (w.shape[1], w.shape[0]), value=w.t(), dtype=_te(w.dtype))
        return _dense(node, gm, a["mat1"], weight, a["input"])
    mat1, mat2 = operand("A", a["mat1"], gm), operand("B", a["mat2"], gm)
    extra = _bias(a["input"], gm)
    if mat1 is None or mat2 is None or extra is None:
        return None
    return Anchor("matmul", {}, [mat1, mat2, *extra], out)


def _te(dtype: torch.dtype) -> str:
    return TE_DTYPES[dtype]


_TRANSPOSES = (aten.transpose.int,)


def _last_two_swapped(arg: Any) -> Any:
    """The input of `arg` when `arg` only swaps its last two axes (`x.transpose(-1, -2)`),
    else None: a batch matmul reads it as its transposed B, with no copy."""
    if not isinstance(arg, fx.Node) or target_key(arg) not in _TRANSPOSES:
        return None
    src, dims = arg.args[0], arg.args[1:3]
    ndim = len(shape_of(src) or ())
    ints = [d for d in dims if isinstance(d, int)]
    if ndim < 2 or len(ints) != 2:
        return None
    return src if sorted(d % ndim for d in ints) == [ndim - 2, ndim - 1] else None


@register(ANCHORS, aten.matmul.default, aten.mm.default, aten.bmm.default)
def _matmul(node, gm):
    """A 2-D B: a matmul over A's flattened leading axes. Both of rank >= 3 with the same
    leading axes: a batch matmul over those axes flattened (B read through a transpose of its
    last two axes when it is one)."""
    a_arg, b_arg = node.args[0], node.args[1]
    sa, sb = shape_of(a_arg), shape_of(b_arg)
    if sa is None or sb is None or shape_of(node) is None:
        return None
    if len(sb) == 2 and len(sa) >= 2:
        rows = math.prod(sa[:-1])
        a, b = operand("A", a_arg, gm, (rows, sa[-1])), operand("B", b_arg, gm)
        return None if a is None or b is None else Anchor("matmul", {}, [a, b], (rows, sb[1]))
    if len(sa) >= 3 and len(sa) == len(sb) and sa[:-2] == sb[:-2]:
        batch = math.prod(sa[:-2])
        source = _last_two_swapped(b_arg)
        transpose_b = source is not None
        b_shape = (batch, sb[-1], sb[-2]) if transpose_b else (batch, *sb[-2:])
        a = operand("A", a_arg, gm, (batch, *sa[-2:]))
        b = operand("B", source if transpose_b else b_arg, gm, b_shape)
        out = (batch, sa[-2], sb[-1])
        attrs = {"transpose_b": transpose_b}
        return None if a is None or b is None else Anchor("batch_matmul", attrs, [a, b], out)
    return None


# ---- reductions ------------------------------------------------------------------------------


@register(ANCHORS, aten.layer_norm.default)
def _layer_norm(node, gm):
    a = args_of(node)
    out = shape_of(node)
    data = operand("data", a["input"], gm)
    if data is None or out is None:
        return None
    norm = tuple(a["normalized_shape"])
    ones = torch.ones(norm)
    w, b = a["weight"], a["bias"]
    gamma = operand("gamma", w, gm) if w is not None else Operand("gamma", norm, value=ones)
    beta = operand("beta", b, gm) if b is not None else Operand("beta", norm, value=ones * 0)
    if gamma is None or beta is None:
        return None
    axes = tuple(range(len(out) - len(norm), len(out)))
    return Anchor("layer_norm", {"axis": axes, "eps": float(a["eps"])}, [data, gamma, beta], out)


@register(ANCHORS, aten.rms_norm.default)
def _rms_norm(node, gm):
    """RMSNorm over the trailing `normalized_shape` axes, as (rows, features)."""
    a = args_of(node)
    out, val = shape_of(node), node.meta.get("val")
    norm = tuple(a["normalized_shape"])
    if out is None or not norm or tuple(out[len(out) - len(norm) :]) != norm:
        return None
    features = math.prod(norm)
    rows = math.prod(out) // features
    data = operand("data", a["input"], gm, (rows, features))
    w = a["weight"]
    ones = torch.ones(features)
    gamma = (
        operand("gamma", w, gm, (features,))
        if w is not None
        else Operand("gamma", (features,), value=ones)
    )
    if data is None or gamma is None:
        return None
    eps = a["eps"] if a["eps"] is not None else torch.finfo(val.dtype).eps
    return Anchor("rms_norm", {"eps": float(eps)}, [data, gamma], (rows, features))


@register(ANCHORS, aten.softmax.int, aten._softmax.default)
def _softmax(node, gm):
    a = args_of(node)
    out, data = shape_of(node), operand("data", a["input"], gm)
    if data is None or out is None or a.get("dtype") is not None:
        return None
    return Anchor("softmax", {"axis": a["dim"] % len(out)}, [data], out)


# ---- pooling ---------------------------------------------------------------------------------


def _pool(node, gm, kind, x, kernel, stride, padding, ceil_mode, extra, out=None) -> Anchor | None:
    """A pooling anchor; `out` is the DAG's output shape when the node's differs (a mean over
    the spatial axes drops them)."""
    out, data = out or shape_of(node), operand("data", x, gm)
    if data is None or out is None or len(out) != 4 or ceil_mode:
        return None
    kernel = _pair(kernel)
    stride = kernel if stride is None or len(stride) == 0 else _pair(stride)
    attrs = {"kernel": kernel, "stride": stride, "padding": _pair(padding), **extra}
    return Anchor(kind, attrs, [data], out)


@register(ANCHORS, aten.max_pool2d.default)
def _max_pool(node, gm):
    a = args_of(node)
    extra = {"dilation": _pair(a["dilation"])}
    return _pool(
        node,
        gm,
        "max_pool2d",
        a["input"],
        a["kernel_size"],
        a["stride"],
        a["padding"],
        a["ceil_mode"],
        extra,
    )


@register(ANCHORS, aten.avg_pool2d.default)
def _avg_pool(node, gm):
    a = args_of(node)
    if a["divisor_override"] is not None:
        return None
    extra = {"count_include_pad": bool(a["count_include_pad"])}
    return _pool(
        node,
        gm,
        "avg_pool2d",
        a["input"],
        a["kernel_size"],
        a["stride"],
        a["padding"],
        a["ceil_mode"],
        extra,
    )


def _global_pool(node, gm, x, out_hw: tuple[int, int]) -> Anchor | None:
    """An average pool with kernel = stride = input / output size (they must divide)."""
    xs = shape_of(x)
    if xs is None or len(xs) != 4 or any(o <= 0 or xs[2 + i] % o for i, o in enumerate(out_hw)):
        return None
    kernel = tuple(xs[2 + i] // o for i, o in enumerate(out_hw))
    extra = {"count_include_pad": True}
    out = (xs[0], xs[1], *out_hw)
    return _pool(node, gm, "avg_pool2d", x, kernel, kernel, 0, False, extra, out)


@register(ANCHORS, aten.adaptive_avg_pool2d.default)
def _adaptive_avg_pool(node, gm):
    """An adaptive average pool whose output size divides the input's (global average pooling
    when the output is 1x1)."""
    a = args_of(node)
    xs = shape_of(a["input"])
    if xs is None or len(xs) != 4:
        return None
    size = _pair(a["output_size"])
    return _global_pool(node, gm, a["input"], (size[0] or xs[2], size[1] or xs[3]))


@register(ANCHORS, aten.mean.dim)
def _mean(node, gm):
    """`x.mean((2, 3))` of an NCHW tensor: global average pooling."""
    a = args_of(node)
    xs, dims = shape_of(a["input"]), a["dim"]
    if xs is None or len(xs) != 4 or a["dtype"] is not None or dims is None:
        return None
    if sorted(d % 4 for d in dims) != [2, 3]:
        return None
    return _global_pool(node, gm, a["input"], (1, 1))
