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
from autosched.frontend.layout import logical_view
from autosched.frontend.specs import Anchor, Epilogue, Operand
from autosched.schedule.compute_dag import ComputeDAG
from autosched.topi.utils import cast_to

ACC_DTYPE = "float32"  # the accumulation (and epilogue) dtype of every group


def _conv2d(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    s = a.attrs
    return topi.nn.conv2d_nchw(
        t[0], t[1], s["stride"], s["padding"], s["dilation"], out_dtype=ACC_DTYPE
    )


def _depthwise(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    s = a.attrs
    return topi.nn.depthwise_conv2d_nchw(
        t[0], t[1], s["stride"], s["padding"], s["dilation"], out_dtype=ACC_DTYPE
    )


def _group_conv(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    s = a.attrs
    return topi.nn.group_conv2d_nchw(
        t[0],
        t[1],
        s["stride"],
        s["padding"],
        s["dilation"],
        groups=s["groups"],
        out_dtype=ACC_DTYPE,
    )


def _bias_add(out: te.Tensor, bias: te.Tensor, axis: int) -> te.Tensor:
    """`out + bias` along `axis`, the bias read in the output's dtype."""
    return te.compute(
        out.shape,
        lambda *i: out[i] + cast_to(bias[i[axis]], out.dtype),
        name="T_add",
        tag="broadcast",
    )


def _with_bias(build: Callable, axis: int) -> Callable:
    """A builder that adds its optional third operand (a bias, along `axis`)."""

    def wrapped(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
        out = build(a, t)
        return _bias_add(out, t[2], axis % len(out.shape)) if len(t) > 2 else out

    return wrapped


def _upcast(build: Callable) -> Callable:
    """A builder of a reduction or pool whose inputs are first converted to float32, as
    PyTorch computes half-precision normalisations (`T_upcast` stages, none for float32)."""

    def wrapped(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
        wide = [
            x
            if x.dtype == ACC_DTYPE
            else te.compute(
                x.shape, lambda *i, x=x: te.cast(x[i], ACC_DTYPE), name="T_upcast", tag="elemwise"
            )
            for x in t
        ]
        return build(a, wide)

    return wrapped


def _rms_norm(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    """`x * rsqrt(mean(x^2) + eps) * gamma` over the features of (rows, features): the mean of
    squares (`T_rms_norm_ms`, a reduction), then the scaling (topi has no RMSNorm)."""
    x, gamma = t[0], t[1]
    rows, features = x.shape
    k = te.reduce_axis((0, features), name="k")
    inv_n = te.const(1.0 / features, x.dtype)
    ms = te.compute(
        (rows,), lambda i: te.sum(x[i, k] * x[i, k] * inv_n, axis=k), name="T_rms_norm_ms"
    )
    eps = te.const(a.attrs["eps"], x.dtype)
    return te.compute(
        x.shape,
        lambda i, j: x[i, j] * te.rsqrt(ms[i] + eps) * gamma[j],
        name="T_rms_norm",
        tag="injective",
    )


ANCHOR_BUILDERS: dict[str, Callable[[Anchor, list[te.Tensor]], te.Tensor]] = {
    "conv2d": _with_bias(_conv2d, 1),
    "depthwise_conv2d": _with_bias(_depthwise, 1),
    "group_conv2d": _with_bias(_group_conv, 1),
    "dense": _with_bias(lambda a, t: topi.nn.dense(t[0], t[1], out_dtype=ACC_DTYPE), -1),
    "matmul": _with_bias(lambda a, t: topi.nn.matmul(t[0], t[1], out_dtype=ACC_DTYPE), -1),
    "batch_matmul": lambda a, t: topi.nn.batch_matmul(
        t[0], t[1], transpose_b=a.attrs.get("transpose_b", False), out_dtype=ACC_DTYPE
    ),
    "layer_norm": _upcast(
        lambda a, t: topi.nn.layer_norm(t[0], t[1], t[2], a.attrs["axis"], a.attrs["eps"])
    ),
    "softmax": _upcast(lambda a, t: topi.nn.softmax(t[0], a.attrs["axis"])),
    "rms_norm": _upcast(_rms_norm),
    "max_pool2d": _upcast(
        lambda a, t: topi.nn.max_pool2d(
            t[0], a.attrs["kernel"], a.attrs["stride"], a.attrs["padding"], a.attrs["dilation"]
        )
    ),
    "avg_pool2d": _upcast(
        lambda a, t: topi.nn.avg_pool2d(
            t[0],
            a.attrs["kernel"],
            a.attrs["stride"],
            a.attrs["padding"],
            count_include_pad=a.attrs["count_include_pad"],
        )
    ),
}

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _relu6(x: te.Expr) -> te.Expr:
    return te.min(te.max(x, te.const(0.0, "float32")), te.const(6.0, "float32"))


ACTIVATIONS: dict[str, Callable[[te.Expr], te.Expr]] = {
    "relu": lambda x: te.max(x, te.const(0.0, "float32")),
    "relu6": _relu6,
    "hardswish": lambda x: x * _relu6(x + 3.0) * (1.0 / 6.0),
    "hardsigmoid": lambda x: _relu6(x + 3.0) * (1.0 / 6.0),
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
            return cast_to(t[0][_broadcast_index(t[0].shape, i)], x.dtype)
        return te.const(e.attrs["scalar"], x.dtype)

    def body(*i):
        return fn(other(i), x[i]) if swap else fn(x[i], other(i))

    return te.compute(x.shape, body, name=name, tag="broadcast")


def _scale_shift(e: Epilogue, x: te.Tensor, t: list[te.Tensor], name: str) -> te.Tensor:
    axis = e.attrs["axis"]
    scale, shift = t
    return te.compute(
        x.shape,
        lambda *i: x[i] * cast_to(scale[i[axis]], x.dtype) + cast_to(shift[i[axis]], x.dtype),
        name=name,
        tag="broadcast",
    )


def _clamp(e: Epilogue, x: te.Tensor, t: list[te.Tensor], name: str) -> te.Tensor:
    lo, hi = e.attrs["min"], e.attrs["max"]

    def body(*i):
        v: te.Expr = x[i]
        v = v if lo is None else te.max(v, te.const(float(lo), x.dtype))
        return v if hi is None else te.min(v, te.const(float(hi), x.dtype))

    return te.compute(x.shape, body, name=name, tag="elemwise")


def _pass_through(e: Epilogue, x: te.Tensor, t: list[te.Tensor], name: str) -> te.Tensor:
    """Inference dropout and copies; a cast, whose rounding the group's output does once."""
    return x


EPILOGUE_BUILDERS: dict[str, Callable] = {
    "act": _act,
    "binary": _binary,
    "scale_shift": _scale_shift,
    "clamp": _clamp,
    "identity": _pass_through,
    "reshape": _pass_through,
    "cast": _pass_through,
}


def _placeholders(operands: list[Operand], suffix: str) -> tuple[list[te.Tensor], list[te.Tensor]]:
    """The operands' placeholders (the DAG's arguments) and the tensors the builders read: the
    placeholder itself, or its logical view for an operand read through a memory layout."""
    args, reads = [], []
    for o in operands:
        arg = te.placeholder(o.placeholder_shape, o.dtype, f"{o.role}{suffix}")
        args.append(arg)
        reads.append(arg if o.layout is None else logical_view(o.layout, arg, o.shape))
    return args, reads


def build_dag(
    anchor: Anchor, epilogues: Sequence[Epilogue], out_dtype: str = "float32"
) -> ComputeDAG:
    """The DAG of a group: its args are the anchor's operands, the epilogues' operands in
    order, then the output. The anchor accumulates and the epilogues compute in float32; the
    output is rounded to `out_dtype` by a final `T_cast` (float16 and bfloat16 groups)."""
    inputs, reads = _placeholders(anchor.operands, "")
    out = ANCHOR_BUILDERS[anchor.kind](anchor, reads)
    for k, e in enumerate(epilogues, 1):
        args, extra = _placeholders(e.operands, str(k))
        inputs += args
        out = EPILOGUE_BUILDERS[e.kind](e, out, extra, f"T_{e.label}{k}")
    if out.dtype != out_dtype:
        out = topi.cast(out, out_dtype)
    return ComputeDAG([*inputs, out])
