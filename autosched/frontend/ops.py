"""PyTorch operators as anchor specs, a registered table keyed by fx target (the epilogues'
table, in `epilogues`, uses the same keys).

A key is the module class (`call_module`), the function (`call_function`) or `("method",
name)` (`call_method`). An anchor matcher turns a node into an `Anchor` (or None when its
arguments are outside what our topi covers: the node then stays in PyTorch); an epilogue
matcher turns a consumer of the group's current output into an `Epilogue`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from autosched.frontend.specs import Anchor, Operand

ANCHORS: dict[Any, Callable] = {}


def register(table: dict, *keys: Any) -> Callable:
    """Decorator: enter the function in `table` under each of `keys`."""

    def wrap(fn: Callable) -> Callable:
        for key in keys:
            table[key] = fn
        return fn

    return wrap


def target_key(node: fx.Node, gm: fx.GraphModule) -> Any:
    """The table key of a node: its module's class, its function, or ("method", name)."""
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target)))
    if node.op == "call_function":
        return node.target
    if node.op == "call_method":
        return ("method", node.target)
    return None


def shape_of(node: Any) -> tuple[int, ...] | None:
    """The static shape ShapeProp recorded for a node (None when it is not one float32 tensor)."""
    meta = getattr(node, "meta", {}).get("tensor_meta")
    if meta is None or not hasattr(meta, "shape") or meta.dtype != torch.float32:
        return None
    return tuple(int(s) for s in meta.shape)


def _arg(node: fx.Node, i: int, name: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


class _ParamRef:
    """A module's parameter standing where a get_attr node would, for `constant`."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def constant(arg: Any, gm: fx.GraphModule) -> torch.Tensor | None:
    """The tensor an argument names when it is fixed at compile time: a get_attr node, or a
    module's parameter (`_ParamRef`)."""
    if isinstance(arg, _ParamRef):
        return arg.tensor.detach()
    if isinstance(arg, fx.Node) and arg.op == "get_attr":
        value = gm
        for part in str(arg.target).split("."):
            value = getattr(value, part)
        return value.detach() if isinstance(value, torch.Tensor) else None
    return None


def operand(role: str, arg: Any, gm: fx.GraphModule, shape: tuple | None = None) -> Operand | None:
    """An operand for `arg`: a constant, or a runtime float32 tensor node (None otherwise)."""
    value = constant(arg, gm)
    if value is not None:
        if value.dtype != torch.float32:
            return None
        return Operand(role, tuple(shape or value.shape), value=value)
    arg_shape = shape_of(arg) if isinstance(arg, fx.Node) else None
    if arg_shape is not None:
        return Operand(role, tuple(shape or arg_shape), node=arg)
    return None


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


# ---- anchors ---------------------------------------------------------------------------------


def _conv(node, gm, x, w, b, stride, padding, dilation, groups) -> Anchor | None:
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
    attrs = {"stride": _pair(stride), "padding": _pair(padding), "dilation": _pair(dilation)}
    ci = xs[1]
    if groups == 1:
        kind = "conv2d"
    elif groups == ci and co % ci == 0:
        kind = "depthwise_conv2d"
        weight.shape = (ci, co // ci, kh, kw)
    else:
        kind, attrs["groups"] = "group_conv2d", groups
    operands = [data, weight]
    if b is not None:
        bias = operand("bias", b, gm)
        if bias is None:
            return None
        operands.append(bias)
    return Anchor(kind, attrs, operands, out)


@register(ANCHORS, nn.Conv2d)
def _conv_module(node, gm):
    m = gm.get_submodule(node.target)
    if m.padding_mode != "zeros":
        return None
    w = _ParamRef(m.weight)
    b = None if m.bias is None else _ParamRef(m.bias)
    return _conv(node, gm, node.args[0], w, b, m.stride, m.padding, m.dilation, m.groups)


@register(ANCHORS, F.conv2d, torch.conv2d)
def _conv_function(node, gm):
    return _conv(
        node,
        gm,
        _arg(node, 0, "input"),
        _arg(node, 1, "weight"),
        _arg(node, 2, "bias"),
        _arg(node, 3, "stride", 1),
        _arg(node, 4, "padding", 0),
        _arg(node, 5, "dilation", 1),
        _arg(node, 6, "groups", 1),
    )


def _linear(node, gm, x, w, b) -> Anchor | None:
    xs, out = shape_of(x), shape_of(node)
    if xs is None or out is None or len(xs) < 2:
        return None
    rows = math.prod(xs[:-1])
    data = operand("data", x, gm, (rows, xs[-1]))
    weight = operand("weight", w, gm)
    if data is None or weight is None or len(weight.shape) != 2:
        return None
    operands = [data, weight]
    if b is not None:
        bias = operand("bias", b, gm)
        if bias is None:
            return None
        operands.append(bias)
    return Anchor("dense", {}, operands, (rows, weight.shape[0]))


@register(ANCHORS, nn.Linear)
def _linear_module(node, gm):
    m = gm.get_submodule(node.target)
    b = None if m.bias is None else _ParamRef(m.bias)
    return _linear(node, gm, node.args[0], _ParamRef(m.weight), b)


@register(ANCHORS, F.linear)
def _linear_function(node, gm):
    return _linear(node, gm, _arg(node, 0, "input"), _arg(node, 1, "weight"), _arg(node, 2, "bias"))


def _last_two_swapped(arg: Any, gm: fx.GraphModule) -> Any:
    """The input of `arg` when `arg` only swaps its last two axes (`x.transpose(-1, -2)`,
    `x.mT`), else None: a batch matmul reads it as its transposed B, with no copy."""
    if not isinstance(arg, fx.Node) or target_key(arg, gm) not in (
        ("method", "transpose"),
        torch.transpose,
    ):
        return None
    src, dims = arg.args[0], arg.args[1:3]
    ndim = len(shape_of(src) or ())
    ints = [d for d in dims if isinstance(d, int)]
    if ndim < 2 or len(ints) != 2:
        return None
    return src if sorted(d % ndim for d in ints) == [ndim - 2, ndim - 1] else None


@register(ANCHORS, torch.matmul, operator.matmul, torch.mm, torch.bmm, ("method", "matmul"))
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
        source = _last_two_swapped(b_arg, gm)
        transpose_b = source is not None
        b_shape = (batch, sb[-1], sb[-2]) if transpose_b else (batch, *sb[-2:])
        a = operand("A", a_arg, gm, (batch, *sa[-2:]))
        b = operand("B", source if transpose_b else b_arg, gm, b_shape)
        out = (batch, sa[-2], sb[-1])
        attrs = {"transpose_b": transpose_b}
        return None if a is None or b is None else Anchor("batch_matmul", attrs, [a, b], out)
    return None


def _layer_norm(node, gm, x, normalized_shape, w, b, eps) -> Anchor | None:
    out = shape_of(node)
    data = operand("data", x, gm)
    if data is None or out is None:
        return None
    norm = tuple(normalized_shape)
    ones = torch.ones(norm)
    gamma = operand("gamma", w, gm) if w is not None else Operand("gamma", norm, value=ones)
    beta = operand("beta", b, gm) if b is not None else Operand("beta", norm, value=ones * 0)
    if gamma is None or beta is None:
        return None
    axes = tuple(range(len(out) - len(norm), len(out)))
    return Anchor("layer_norm", {"axis": axes, "eps": float(eps)}, [data, gamma, beta], out)


@register(ANCHORS, nn.LayerNorm)
def _layer_norm_module(node, gm):
    m = gm.get_submodule(node.target)
    w = None if m.weight is None else _ParamRef(m.weight)
    b = None if m.bias is None else _ParamRef(m.bias)
    return _layer_norm(node, gm, node.args[0], m.normalized_shape, w, b, m.eps)


@register(ANCHORS, F.layer_norm)
def _layer_norm_function(node, gm):
    return _layer_norm(
        node,
        gm,
        _arg(node, 0, "input"),
        _arg(node, 1, "normalized_shape"),
        _arg(node, 2, "weight"),
        _arg(node, 3, "bias"),
        _arg(node, 4, "eps", 1e-5),
    )


def _softmax(node, gm, x, dim, dtype=None) -> Anchor | None:
    out, data = shape_of(node), operand("data", x, gm)
    if data is None or out is None or dtype is not None or not isinstance(dim, int):
        return None
    return Anchor("softmax", {"axis": dim % len(out)}, [data], out)


@register(ANCHORS, nn.Softmax)
def _softmax_module(node, gm):
    return _softmax(node, gm, node.args[0], gm.get_submodule(node.target).dim)


@register(ANCHORS, F.softmax, torch.softmax, ("method", "softmax"))
def _softmax_function(node, gm):
    return _softmax(
        node, gm, _arg(node, 0, "input"), _arg(node, 1, "dim"), node.kwargs.get("dtype")
    )


def _pool(node, gm, kind, x, kernel, stride, padding, ceil_mode, extra) -> Anchor | None:
    out, data = shape_of(node), operand("data", x, gm)
    if data is None or out is None or len(out) != 4 or ceil_mode:
        return None
    kernel = _pair(kernel)
    stride = kernel if stride is None or stride == [] else _pair(stride)
    attrs = {"kernel": kernel, "stride": stride, "padding": _pair(padding), **extra}
    return Anchor(kind, attrs, [data], out)


@register(ANCHORS, nn.MaxPool2d)
def _max_pool_module(node, gm):
    m = gm.get_submodule(node.target)
    if m.return_indices:
        return None
    extra = {"dilation": _pair(m.dilation)}
    return _pool(
        node, gm, "max_pool2d", node.args[0], m.kernel_size, m.stride, m.padding, m.ceil_mode, extra
    )


@register(ANCHORS, F.max_pool2d)
def _max_pool_function(node, gm):
    if _arg(node, 6, "return_indices", False):
        return None
    return _pool(
        node,
        gm,
        "max_pool2d",
        _arg(node, 0, "input"),
        _arg(node, 1, "kernel_size"),
        _arg(node, 2, "stride"),
        _arg(node, 3, "padding", 0),
        _arg(node, 5, "ceil_mode", False),
        {"dilation": _pair(_arg(node, 4, "dilation", 1))},
    )


@register(ANCHORS, nn.AvgPool2d)
def _avg_pool_module(node, gm):
    m = gm.get_submodule(node.target)
    if m.divisor_override is not None:
        return None
    extra = {"count_include_pad": bool(m.count_include_pad)}
    return _pool(
        node, gm, "avg_pool2d", node.args[0], m.kernel_size, m.stride, m.padding, m.ceil_mode, extra
    )


@register(ANCHORS, F.avg_pool2d)
def _avg_pool_function(node, gm):
    if _arg(node, 6, "divisor_override") is not None:
        return None
    return _pool(
        node,
        gm,
        "avg_pool2d",
        _arg(node, 0, "input"),
        _arg(node, 1, "kernel_size"),
        _arg(node, 2, "stride"),
        _arg(node, 3, "padding", 0),
        _arg(node, 4, "ceil_mode", False),
        {"count_include_pad": bool(_arg(node, 5, "count_include_pad", True))},
    )


def _adaptive_avg_pool(node, gm, x, output_size) -> Anchor | None:
    """An adaptive average pool whose output size divides the input's: a plain average pool
    with kernel = stride = input / output (global average pooling when the output is 1x1)."""
    xs = shape_of(x) if isinstance(x, fx.Node) else None
    if xs is None or len(xs) != 4:
        return None
    out_hw = tuple(xs[2 + i] if o is None else o for i, o in enumerate(_pair(output_size)))
    if any(o <= 0 or xs[2 + i] % o for i, o in enumerate(out_hw)):
        return None
    kernel = tuple(xs[2 + i] // o for i, o in enumerate(out_hw))
    return _pool(node, gm, "avg_pool2d", x, kernel, kernel, 0, False, {"count_include_pad": True})


@register(ANCHORS, nn.AdaptiveAvgPool2d)
def _adaptive_avg_pool_module(node, gm):
    return _adaptive_avg_pool(node, gm, node.args[0], gm.get_submodule(node.target).output_size)


@register(ANCHORS, F.adaptive_avg_pool2d)
def _adaptive_avg_pool_function(node, gm):
    return _adaptive_avg_pool(node, gm, _arg(node, 0, "input"), _arg(node, 1, "output_size"))
