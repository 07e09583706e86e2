"""Elementwise unary operators."""

from __future__ import annotations

from autosched import te
from autosched.te.expr import const
from autosched.topi.utils import check_tensor


def relu(x: te.Tensor) -> te.Tensor:
    """`compute(i0, ...) = max(x[i0, ...], 0)`: TVM's relu (op name `compute`), any rank."""
    check_tensor(x, None, "relu", "x")
    zero = const(0, x.dtype)
    return te.compute(x.shape, lambda *i: te.max(x[i], zero), name="compute", tag="elemwise")
