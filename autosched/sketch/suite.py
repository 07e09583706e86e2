"""The workload suite of issue 6 (to move into autosched/workloads.py later).

`SUITE` maps a name to `(function, args)`; `function(*args)` returns the kernel's tensors
(inputs, then the output), ready for `ComputeDAG`. Every function is built from topi, so op
and axis names are TVM's.
"""

from __future__ import annotations

from typing import Callable

from .. import te, topi
from ..compute_dag import ComputeDAG


def matmul(n: int, m: int, k: int) -> list[te.Tensor]:
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    return [a, b, topi.matmul(a, b)]


def conv2d_bias_relu(n: int, ci: int, h: int, w: int, co: int, kh: int, kw: int,
                     stride: int, pad: int) -> list[te.Tensor]:
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    bias = te.placeholder((1, co, 1, 1), name="bias")
    conv = topi.conv2d_nchw(data, kernel, stride, pad, dilation=1, out_dtype="float32")
    return [data, kernel, bias, topi.relu(conv + bias)]


def conv2d(n: int, ci: int, h: int, w: int, co: int, kh: int, kw: int,
           stride: int, pad: int) -> list[te.Tensor]:
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    return [data, kernel, topi.conv2d_nchw(data, kernel, stride, pad, dilation=1)]


def depthwise_conv2d(n: int, c: int, h: int, w: int, kh: int, kw: int,
                     stride: int, pad: int) -> list[te.Tensor]:
    data = te.placeholder((n, c, h, w), name="data")
    kernel = te.placeholder((c, 1, kh, kw), name="kernel")
    return [data, kernel, topi.depthwise_conv2d_nchw(data, kernel, stride, pad)]


def batch_matmul(b: int, m: int, n: int, k: int) -> list[te.Tensor]:
    """A (b, m, k) x B (b, n, k)^T, TVM's default layout."""
    x = te.placeholder((b, m, k), name="A")
    y = te.placeholder((b, n, k), name="B")
    return [x, y, topi.batch_matmul(x, y)]


def dense_bias(batch: int, in_dim: int, out_dim: int) -> list[te.Tensor]:
    data = te.placeholder((batch, in_dim), name="data")
    weight = te.placeholder((out_dim, in_dim), name="weight")
    bias = te.placeholder((out_dim,), name="bias")
    return [data, weight, bias, topi.dense(data, weight, bias)]


def softmax(n: int, m: int) -> list[te.Tensor]:
    x = te.placeholder((n, m), name="x")
    return [x, topi.softmax(x)]


SUITE: dict[str, tuple[Callable[..., list[te.Tensor]], tuple]] = {
    "matmul_1024": (matmul, (1024, 1024, 1024)),
    "conv2d_bias_relu_7x7_512": (conv2d_bias_relu, (1, 512, 7, 7, 512, 3, 3, 1, 1)),
    "conv2d_56x56_64_b16": (conv2d, (16, 64, 56, 56, 64, 3, 3, 1, 1)),
    "depthwise_56x56_144": (depthwise_conv2d, (1, 144, 56, 56, 3, 3, 1, 1)),
    "batch_matmul_12x128x64x128": (batch_matmul, (12, 128, 128, 64)),
    "dense_bias_1x784x128": (dense_bias, (1, 784, 128)),
    "softmax_1024": (softmax, (1024, 1024)),
    "conv2d_224_7x7_s2": (conv2d, (1, 3, 224, 224, 64, 7, 7, 2, 3)),
}


def suite_dag(name: str, args: tuple | None = None) -> ComputeDAG:
    """The ComputeDAG of suite workload `name` (with other `args`, e.g. reduced sizes)."""
    fn, default = SUITE[name]
    return ComputeDAG(fn(*(default if args is None else args)))
