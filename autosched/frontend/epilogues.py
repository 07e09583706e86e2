"""Element-wise consumers a group absorbs: a registered table keyed like `ops.ANCHORS`.

A matcher gets the consumer node, the graph module, the group's current output node and the
shape that output has in the DAG; it returns an `Epilogue` or None (the consumer then stays in
PyTorch and the group ends). Every epilogue keeps the shape of its input. Operands that
broadcast (a bias, a folded batch norm's scale and shift) need the DAG output in the torch
layout, which every anchor but a flattened linear or matmul has.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autosched.frontend.ops import constant, operand, register, shape_of
from autosched.frontend.specs import Epilogue, Operand

EPILOGUES: dict[Any, Callable] = {}


def _activation(name: str) -> Callable:
    def match(node, gm, cur, dag_shape) -> Epilogue | None:
        return Epilogue("act", {"name": name})

    return match


register(EPILOGUES, nn.ReLU, F.relu, torch.relu, ("method", "relu"))(_activation("relu"))
register(EPILOGUES, nn.SiLU, F.silu, ("method", "silu"))(_activation("silu"))
register(EPILOGUES, nn.Sigmoid, torch.sigmoid, F.sigmoid, ("method", "sigmoid"))(
    _activation("sigmoid")
)
register(EPILOGUES, nn.Tanh, torch.tanh, F.tanh, ("method", "tanh"))(_activation("tanh"))


@register(EPILOGUES, nn.GELU)
def _gelu_module(node, gm, cur, dag_shape):
    approximate = gm.get_submodule(node.target).approximate
    return Epilogue("act", {"name": "gelu" if approximate == "none" else "gelu_tanh"})


@register(EPILOGUES, F.gelu)
def _gelu_function(node, gm, cur, dag_shape):
    approximate = node.kwargs.get("approximate", "none")
    return Epilogue("act", {"name": "gelu" if approximate == "none" else "gelu_tanh"})


def _broadcasts(small: tuple, big: tuple) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big), strict=False))


def _binary(op: str) -> Callable:
    def match(node, gm, cur, dag_shape) -> Epilogue | None:
        extra = {k: v for k, v in node.kwargs.items() if (k, v) != ("alpha", 1)}
        if len(node.args) != 2 or extra:  # torch.add's alpha, torch.div's rounding_mode
            return None
        a, b = node.args
        if a is cur and b is cur:
            return None
        other, swap = (b, False) if a is cur else (a, True)
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return Epilogue("binary", {"op": op, "swap": swap, "scalar": float(other)})
        cur_shape = shape_of(cur)
        value = constant(other, gm)
        other_shape = tuple(value.shape) if value is not None else shape_of(other)
        if other_shape is None:
            return None
        if other_shape == cur_shape:
            opnd = operand("other", other, gm, dag_shape)
        elif cur_shape == tuple(dag_shape) and _broadcasts(other_shape, cur_shape):
            opnd = operand("other", other, gm)
        else:
            return None
        return None if opnd is None else Epilogue("binary", {"op": op, "swap": swap}, [opnd])

    return match


register(EPILOGUES, operator.add, torch.add, ("method", "add"))(_binary("add"))
register(EPILOGUES, operator.sub, torch.sub, ("method", "sub"))(_binary("sub"))
register(EPILOGUES, operator.mul, torch.mul, ("method", "mul"))(_binary("mul"))
register(EPILOGUES, operator.truediv, torch.div, ("method", "div"))(_binary("div"))


def _scale_shift(cur, dag_shape, mean, var, weight, bias, eps) -> Epilogue | None:
    """Inference batch norm folded into `x * scale[c] + shift[c]` along axis 1."""
    if any(t is None for t in (mean, var)) or tuple(dag_shape) != shape_of(cur):
        return None
    scale = torch.rsqrt(var.float() + eps)
    if weight is not None:
        scale = scale * weight.float()
    shift = -mean.float() * scale
    if bias is not None:
        shift = shift + bias.float()
    channels = (scale.shape[0],)
    return Epilogue(
        "scale_shift",
        {"axis": 1},
        [Operand("scale", channels, value=scale), Operand("shift", channels, value=shift)],
    )


@register(EPILOGUES, nn.BatchNorm1d, nn.BatchNorm2d)
def _batch_norm_module(node, gm, cur, dag_shape):
    m = gm.get_submodule(node.target)
    if m.training or not m.track_running_stats or len(shape_of(cur) or ()) < 2:
        return None
    return _scale_shift(
        cur,
        dag_shape,
        m.running_mean.detach(),
        m.running_var.detach(),
        None if m.weight is None else m.weight.detach(),
        None if m.bias is None else m.bias.detach(),
        m.eps,
    )


@register(EPILOGUES, F.batch_norm)
def _batch_norm_function(node, gm, cur, dag_shape):
    def arg(i, name, default=None):
        return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)

    if arg(5, "training", False) or len(shape_of(cur) or ()) < 2:
        return None
    mean, var = (constant(arg(i, n), gm) for i, n in ((1, "running_mean"), (2, "running_var")))
    extra = [arg(i, n) for i, n in ((3, "weight"), (4, "bias"))]
    if any(e is not None and constant(e, gm) is None for e in extra):
        return None
    weight, bias = (None if e is None else constant(e, gm) for e in extra)
    return _scale_shift(cur, dag_shape, mean, var, weight, bias, arg(7, "eps", 1e-5))
