"""Reading the graphs `torch.export` gives: node values, arguments, constants and operands.

Every call is an ATen operator overload (the key of the anchor and epilogue tables) and every
node's `meta["val"]` holds its shape and dtype. Parameters and buffers are `get_attr` nodes:
constants bound once at compile time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.operator_schemas import normalize_function

from autosched.frontend.specs import Operand

aten = torch.ops.aten

# torch dtypes a DAG placeholder can have, by te name
TE_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
TORCH_DTYPES = {te_name: dtype for dtype, te_name in TE_DTYPES.items()}


def register(table: dict, *keys: Any) -> Callable:
    """Decorator: enter the function in `table` under each of `keys`."""

    def wrap(fn: Callable) -> Callable:
        for key in keys:
            table[key] = fn
        return fn

    return wrap


def target_key(node: fx.Node) -> Any:
    """The table key of a node: the ATen operator overload it calls (None for other nodes)."""
    return node.target if node.op == "call_function" else None


def op_name(node: fx.Node) -> str:
    """A readable operator name: `aten.conv2d`, `getitem`."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return f"aten.{packet.__name__}"
    return getattr(target, "__name__", str(target))


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def shape_of(node: Any) -> tuple[int, ...] | None:
    """The static shape of a node's value (None unless it is one floating-point tensor of a
    dtype our DAGs hold, with static sizes)."""
    val = _val(node)
    if not isinstance(val, torch.Tensor) or val.dtype not in TE_DTYPES:
        return None
    try:
        return tuple(int(s) for s in val.shape)
    except TypeError:  # a symbolic size
        return None


def dtype_of(node: Any) -> str | None:
    """The te dtype of a node's value (None when it is not a float32/float16/bfloat16 tensor)."""
    val = _val(node)
    return TE_DTYPES.get(val.dtype) if isinstance(val, torch.Tensor) else None


def args_of(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by their schema names, defaults filled in (an operator's `self`
    is named `input`)."""
    target = node.target
    pair = None
    if callable(target):
        pair = normalize_function(
            target, tuple(node.args), dict(node.kwargs), normalize_to_only_use_kwargs=True
        )
    if pair is None:
        raise ValueError(f"no schema for {node.target}")
    return dict(pair.kwargs)


_CASTS = (aten._to_copy.default, aten.to.dtype)


def constant(arg: Any, gm: fx.GraphModule) -> torch.Tensor | None:
    """The tensor an argument names when it is fixed at compile time: a get_attr node (a
    parameter or buffer of the exported module), or a dtype cast of one (autocast's weights)."""
    if isinstance(arg, fx.Node) and arg.op == "call_function" and arg.target in _CASTS:
        source = constant(arg.args[0], gm)
        dtype = args_of(arg).get("dtype")
        other = {k: v for k, v in arg.kwargs.items() if k != "dtype"}
        if source is None or not isinstance(dtype, torch.dtype) or other:
            return None
        return source.to(dtype)
    if isinstance(arg, fx.Node) and arg.op == "get_attr":
        value: Any = gm
        for part in str(arg.target).split("."):
            value = getattr(value, part)
        return value.detach() if isinstance(value, torch.Tensor) else None
    return None


def operand(role: str, arg: Any, gm: fx.GraphModule, shape: tuple | None = None) -> Operand | None:
    """An operand for `arg`: a constant, or a runtime floating-point tensor node (None
    otherwise)."""
    value = constant(arg, gm)
    if value is not None:
        dtype = TE_DTYPES.get(value.dtype)
        if dtype is None:
            return None
        return Operand(role, tuple(shape or value.shape), value=value, dtype=dtype)
    arg_shape, dtype = shape_of(arg), dtype_of(arg)
    if arg_shape is not None and dtype is not None:
        return Operand(role, tuple(shape or arg_shape), node=arg, dtype=dtype)
    return None
