"""Commutative reducers: sum, max, min, and user-defined ones (`comm_reducer`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autosched.errors import ReduceAxisError, TEError
from autosched.te.dtype import is_float, numpy_dtype
from autosched.te.expr import Const, Expr, IterVar, Reduce, Var, as_expr, binary


class Reducer:
    """A commutative, associative combiner with an identity element."""

    def __init__(
        self, name: str, combine: Callable[[Expr, Expr], Expr], identity: Callable[[str], Any]
    ):
        self.name = name
        self._combine = combine
        self._identity = identity

    def combine(self, a: Expr, b: Expr) -> Expr:
        return as_expr(self._combine(a, b))

    def identity(self, dtype: str) -> Const:
        return Const(self._identity(dtype), dtype)

    def __call__(self, expr: Any, axis: IterVar | Sequence[IterVar], where: Any = None) -> Reduce:
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if not axes:
            raise ReduceAxisError(f"te.{self.name} needs at least one reduce axis")
        for a in axes:
            if not isinstance(a, IterVar) or a.kind != IterVar.REDUCE:
                raise ReduceAxisError(
                    f"te.{self.name}: {a!r} is not a reduce axis; create it with te.reduce_axis"
                )
        cond = as_expr(where, "bool") if where is not None else None
        return Reduce(self, as_expr(expr), axes, cond)

    def __repr__(self) -> str:
        return f"Reducer({self.name})"


def _lowest(dtype: str) -> float:
    return -np.inf if is_float(dtype) else int(np.iinfo(numpy_dtype(dtype)).min)


def _highest(dtype: str) -> float:
    return np.inf if is_float(dtype) else int(np.iinfo(numpy_dtype(dtype)).max)


sum_reducer = Reducer("sum", lambda a, b: binary("+", a, b), lambda dtype: 0)
max_reducer = Reducer("max", lambda a, b: binary("max", a, b), _lowest)
min_reducer = Reducer("min", lambda a, b: binary("min", a, b), _highest)

BUILTIN_REDUCERS = {"sum": sum_reducer, "max": max_reducer, "min": min_reducer}


def comm_reducer(
    fcombine: Callable[[Expr, Expr], Expr], fidentity: Callable[[str], Any], name: str = "reduce"
) -> Reducer:
    """A user-defined reducer: `fcombine(x, y)` combines, `fidentity(dtype)` is its identity."""
    x, y = Var("x", "float32"), Var("y", "float32")
    try:
        as_expr(fcombine(x, y))
    except Exception as exc:
        raise TEError(
            f"comm_reducer {name!r}: fcombine(x, y) must build an expression ({exc})"
        ) from exc
    return Reducer(name, fcombine, fidentity)


def sum(expr: Any, axis: Any, where: Any = None) -> Reduce:  # noqa: A001 - TVM's name
    """Sum of `expr` over the reduce axes `axis`."""
    return sum_reducer(expr, axis, where)
