"""Elementwise binary operators with numpy broadcasting (TVM's `topi.add`, ...); they live in
`te.broadcast` because `te.Tensor`'s arithmetic operators use them."""

from autosched.te.broadcast import (
    add,
    broadcast_shape,
    divide,
    maximum,
    minimum,
    multiply,
    subtract,
)

__all__ = ["add", "broadcast_shape", "divide", "maximum", "minimum", "multiply", "subtract"]
