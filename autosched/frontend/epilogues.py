"""Element-wise consumers a group absorbs: a registered table keyed like `ops.ANCHORS` (ATen
operator overloads).

A matcher gets the consumer node, the graph module, the group's current output node and the
shape that output has in the DAG; it returns an `Epilogue` or None (the consumer then stays in
PyTorch and the group ends). Every epilogue but a reshape keeps the shape of its input.
Operands that broadcast (a bias, a folded batch norm's scale and shift) need the DAG output in
the torch layout, which every anchor but a flattened linear or matmul has. Epilogues compute
in float32 (the anchor's accumulation type); the group's output is rounded once to its torch
dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autosched.frontend.graph import TE_DTYPES, args_of, constant, operand, register, shape_of
from autosched.frontend.specs import Epilogue, Operand

aten = torch.ops.aten

EPILOGUES: dict[Any, Callable] = {}


def _activation(name: str) -> Callable:
    def match(node, gm, cur, dag_shape) -> Epilogue | None:
        return Epilogue("act", {"name": name})

    return match


for _name, _ops in {
    "relu": (aten.relu.default, aten.relu_.default),
    "relu6": (aten.relu6.default,),
    "silu": (aten.silu.default, aten.silu_.default),
    "sigmoid": (aten.sigmoid.default,),
    "tanh": (aten.tanh.default,),
    "hardswish": (aten.hardswish.default, aten.hardswish_.default),
    "hardsigmoid": (aten.hardsigmoid.default,),
}.items():
    register(EPILOGUES, *_ops)(_activation(_name))


@register(EPILOGUES, aten.gelu.default)
def _gelu(node, gm, cur, dag_shape):
    approximate = args_of(node)["approximate"]
    return Epilogue("act", {"name": "gelu" if approximate == "none" else "gelu_tanh"})


@register(EPILOGUES, aten.hardtanh.default, aten.hardtanh_.default, aten.clamp.default)
def _clamp(node, gm, cur, dag_shape):
    """hardtanh / clamp with number bounds; ReLU6 is hardtanh(0, 6)."""
    a = args_of(node)
    lo, hi = (a["min_val"], a["max_val"]) if "min_val" in a else (a["min"], a["max"])
    if (lo, hi) == (0, 6):
        return Epilogue("act", {"name": "relu6"})
    if not all(v is None or isinstance(v, (int, float)) for v in (lo, hi)):
        return None
    return Epilogue("clamp", {"min": lo, "max": hi})


@register(
    EPILOGUES,
    aten.dropout.default,
    aten.clone.default,
    aten.contiguous.default,
    aten.alias.default,
)
def _identity(node, gm, cur, dag_shape):
    """Nodes that pass their input through at inference: dropout outside training, copies."""
    a = args_of(node)
    if a.get("train"):
        return None
    if a.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
        return None
    return Epilogue("identity")


@register(EPILOGUES, aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def _reshape(node, gm, cur, dag_shape):
    """A reshape of the group's (contiguous) output: the kernel's output read in another
    shape. The only epilogue that changes the torch shape."""
    return Epilogue("reshape")


@register(EPILOGUES, aten._to_copy.default, aten.to.dtype)
def _cast(node, gm, cur, dag_shape):
    """A dtype conversion (the output is rounded once to the group's final dtype)."""
    a = args_of(node)
    if any(a.get(k) is not None for k in ("layout", "device")):
        return None
    if a.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
        return None
    dtype = a.get("dtype")
    if dtype not in TE_DTYPES:
        return None
    return Epilogue("cast", {"dtype": TE_DTYPES[dtype]})


def _broadcasts(small: tuple, big: tuple) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big), strict=False))


def _binary(op: str) -> Callable:
    def match(node, gm, cur, dag_shape) -> Epilogue | None:
        a, b = node.args[0], node.args[1]
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2 or (a is cur and b is cur):
            return None
        if node.target._schema.is_mutable and a is not cur:
            return None  # `x += group`: x itself changes, which later readers of x see
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


for _op, _targets in {
    "add": (aten.add.Tensor, aten.add.Scalar, aten.add_.Tensor),
    "sub": (aten.sub.Tensor, aten.sub.Scalar),
    "mul": (aten.mul.Tensor, aten.mul.Scalar, aten.mul_.Tensor),
    "div": (aten.div.Tensor, aten.div.Scalar),
}.items():
    register(EPILOGUES, *_targets)(_binary(_op))


@register(EPILOGUES, aten.batch_norm.default)
def _batch_norm(node, gm, cur, dag_shape):
    """Inference batch norm folded into `x * scale[c] + shift[c]` along axis 1."""
    a = args_of(node)
    if a["training"] or len(shape_of(cur) or ()) < 2 or tuple(dag_shape) != shape_of(cur):
        return None
    mean, var = constant(a["running_mean"], gm), constant(a["running_var"], gm)
    extra = [a["weight"], a["bias"]]
    if mean is None or var is None or any(e is not None and constant(e, gm) is None for e in extra):
        return None
    weight, bias = (None if e is None else constant(e, gm) for e in extra)
    scale = torch.rsqrt(var.float() + a["eps"])
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
