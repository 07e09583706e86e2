"""Elementwise binary operators with numpy broadcasting (TVM's T_add, T_subtract, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosched.errors import TEError
from autosched.te import ops
from autosched.te.expr import Expr, as_expr
from autosched.te.tensor import BINARY_OPS, Tensor, ax_names, compute, with_axis_names


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    """The numpy broadcast of shapes `a` and `b`; raises TEError if they are incompatible."""
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        da = a[-k] if k <= len(a) else 1
        db = b[-k] if k <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise TEError(
                f"{op}: shapes {list(a)} and {list(b)} cannot be broadcast together "
                f"(dimension -{k}: {da} vs {db})"
            )
        out.append(max(da, db))
    return tuple(reversed(out))


def _reader(x: Any, out_shape: tuple[int, ...]) -> Callable[[tuple], Expr]:
    """A function from output axes to the element of `x` they read (scalars read themselves)."""
    if not isinstance(x, Tensor):
        return lambda axes: x
    offset = len(out_shape) - x.ndim

    def read(axes: tuple) -> Expr:
        idx = []
        for d, extent in enumerate(x.shape):
            # A size-1 dim reads index 0 where the output is wider; otherwise it follows the axis.
            idx.append(0 if extent == 1 and out_shape[offset + d] != 1 else axes[offset + d])
        return x[tuple(idx)]

    return read


def _binary(name: str, combine: Callable[[Any, Any], Expr]) -> Callable[[Any, Any], Tensor]:
    op_name = f"T_{name}"

    def apply(a: Any, b: Any) -> Tensor:
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            raise TEError(f"{name}: at least one operand must be a Tensor, got {a!r}, {b!r}")
        like = a.dtype if isinstance(a, Tensor) else b.dtype
        a = a if isinstance(a, Tensor) else as_expr(a, like)
        b = b if isinstance(b, Tensor) else as_expr(b, like)
        shape_a = a.shape if isinstance(a, Tensor) else ()
        shape_b = b.shape if isinstance(b, Tensor) else ()
        shape = broadcast_shape(tuple(shape_a), tuple(shape_b), name)
        read_a, read_b = _reader(a, shape), _reader(b, shape)
        fcompute = with_axis_names(
            ax_names(len(shape)), lambda *axes: combine(read_a(axes), read_b(axes))
        )
        return compute(shape, fcompute, name=op_name, tag="broadcast")

    apply.__name__ = name
    apply.__doc__ = f"`{op_name}`: elementwise {name} of two tensors (or a tensor and a scalar)."
    return apply


add = _binary("add", lambda x, y: x + y)
subtract = _binary("subtract", lambda x, y: x - y)
multiply = _binary("multiply", lambda x, y: x * y)
divide = _binary("divide", lambda x, y: x / y)
maximum = _binary("maximum", lambda x, y: ops.max(x, y))
minimum = _binary("minimum", lambda x, y: ops.min(x, y))

BINARY_OPS.update(add=add, subtract=subtract, multiply=multiply, divide=divide)
