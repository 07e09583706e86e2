"""A fused group (anchor + epilogues) as a ComputeDAG built from topi and te.

Placeholders are named by role (`data`, `weight`, `bias`; an epilogue's operands get its index,
`scale1`, `other2`) and compute ops by kind and index, so two groups with the same structure
and shapes print the same canonical text and get the same `dag-...` workload key: identical
subgraphs are one task. The DAG's arguments are the operands in order, then the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from autosched import te, topi
from autosched.frontend.specs import Anchor, Epilogue, Operand
from autosched.schedule.compute_dag import ComputeDAG


def _conv2d(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    s = a.attrs
    return topi.nn.conv2d_nchw(t[0], t[1], s["stride"], s["padding"], s["dilation"])


def _depthwise(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    s = a.attrs
    return topi.nn.depthwise_conv2d_nchw(t[0], t[1], s["stride"], s["padding"], s["dilation"])


def _group_conv(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    s = a.attrs
    return topi.nn.group_conv2d_nchw(
        t[0], t[1], s["stride"], s["padding"], s["dilation"], groups=s["groups"]
    )


def _with_bias(build: Callable) -> Callable:
    """A conv builder that adds its optional third operand (bias, along the channels)."""

    def wrapped(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
        out = build(a, t)
        return topi.nn.bias_add(out, t[2], axis=1) if len(t) > 2 else out

    return wrapped


ANCHOR_BUILDERS: dict[str, Callable[[Anchor, list[te.Tensor]], te.Tensor]] = {
    "conv2d": _with_bias(_conv2d),
    "depthwise_conv2d": _with_bias(_depthwise),
    "group_conv2d": _with_bias(_group_conv),
    "dense": lambda a, t: topi.nn.dense(t[0], t[1], t[2] if len(t) > 2 else None),
    "matmul": lambda a, t: topi.nn.matmul(t[0], t[1]),
    "batch_matmul": lambda a, t: topi.nn.batch_matmul(
        t[0], t[1], transpose_b=a.attrs.get("transpose_b", False)
    ),
    "layer_norm": lambda a, t: topi.nn.layer_norm(
        t[0], t[1], t[2], a.attrs["axis"], a.attrs["eps"]
    ),
    "softmax": lambda a, t: topi.nn.softmax(t[0], a.attrs["axis"]),
    "max_pool2d": lambda a, t: topi.nn.max_pool2d(
        t[0], a.attrs["kernel"], a.attrs["stride"], a.attrs["padding"], a.attrs["dilation"]
    ),
    "avg_pool2d": lambda a, t: topi.nn.avg_pool2d(
        t[0],
        a.attrs["kernel"],
        a.attrs["stride"],
        a.attrs["padding"],
        count_include_pad=a.attrs["count_include_pad"],
    ),
}

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

ACTIVATIONS: dict[str, Callable[[te.Expr], te.Expr]] = {
    "relu": lambda x: te.max(x, te.const(0.0, "float32")),
    "sigmoid": te.sigmoid,
    "tanh": te.tanh,
    "silu": lambda x: x * te.sigmoid(x),
    "gelu": lambda x: x * 0.5 * (te.erf(x * _SQRT_HALF) + 1.0),
    "gelu_tanh": lambda x: x * 0.5 * (te.tanh((x + x * x * x * 0.044715) * _SQRT_2_OVER_PI) + 1.0),
}

BINARY: dict[str, Callable[[te.Expr, te.Expr], te.Expr]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


def _broadcast_index(shape: Sequence[int], idx: Sequence[te.Expr]) -> tuple:
    """Indices into a tensor of `shape` broadcast (right-aligned) against `idx`."""
    tail = idx[len(idx) - len(shape) :]
    return tuple(0 if s == 1 else i for s, i in zip(shape, tail, strict=True))


def _act(e: Epilogue, x: te.Tensor, t: list[te.Tensor], name: str) -> te.Tensor:
    fn = ACTIVATIONS[e.attrs["name"]]
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name, tag="elemwise")


def _binary(e: Epilogue, x: te.Tensor, t: list[te.Tensor], name: str) -> te.Tensor:
    fn, swap = BINARY[e.attrs["op"]], e.attrs["swap"]

    def other(i):
        if t:
            return t[0][_broadcast_index(t[0].shape, i)]
        return te.const(e.attrs["scalar"], "float32")

    def body(*i):
        return fn(other(i), x[i]) if swap else fn(x[i], other(i))

    return te.compute(x.shape, body, name=name, tag="broadcast")


def _scale_shift(e: Epilogue, x: te.Tensor, t: list[te.Tensor], name: str) -> te.Tensor:
    axis = e.attrs["axis"]
    scale, shift = t
    return te.compute(
        x.shape, lambda *i: x[i] * scale[i[axis]] + shift[i[axis]], name=name, tag="broadcast"
    )


EPILOGUE_BUILDERS: dict[str, Callable] = {
    "act": _act,
    "binary": _binary,
    "scale_shift": _scale_shift,
}


def _placeholders(operands: list[Operand], suffix: str) -> list[te.Tensor]:
    return [te.placeholder(o.shape, "float32", f"{o.role}{suffix}") for o in operands]


def build_dag(anchor: Anchor, epilogues: Sequence[Epilogue]) -> ComputeDAG:
    """The DAG of a group: its args are the anchor's operands, the epilogues' operands in
    order, then the output."""
    inputs = _placeholders(anchor.operands, "")
    out = ANCHOR_BUILDERS[anchor.kind](anchor, inputs)
    for k, e in enumerate(epilogues, 1):
        extra = _placeholders(e.operands, str(k))
        inputs += extra
        out = EPILOGUE_BUILDERS[e.kind](e, out, extra, f"T_{e.label}{k}")
    return ComputeDAG([*inputs, out])
