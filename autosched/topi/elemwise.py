"""Elementwise unary operators: relu, and cast (the epilogue that rounds an fp32 accumulation
to a half-precision output)."""

from __future__ import annotations

from autosched import te
from autosched.te.dtype import check_dtype
from autosched.te.expr import const
from autosched.topi.utils import check_tensor


def relu(x: te.Tensor) -> te.Tensor:
    """`compute(i0, ...) = max(x[i0, ...], 0)`: TVM's relu (op name `compute`), any rank."""
    check_tensor(x, None, "relu", "x")
    zero = const(0, x.dtype)
    return te.compute(x.shape, lambda *i: te.max(x[i], zero), name="compute", tag="elemwise")


def cast(x: te.Tensor, dtype: str) -> te.Tensor:
    """`T_cast(i0, ...) = dtype(x[i0, ...])`: TVM's topi.cast, any rank."""
    check_tensor(x, None, "cast", "x")
    dtype = check_dtype(dtype)
    return te.compute(x.shape, lambda *i: te.cast(x[i], dtype), name="T_cast", tag="elemwise")
