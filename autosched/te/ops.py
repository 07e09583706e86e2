"""Elementwise operators and math calls of the expression language."""

from __future__ import annotations

from typing import Any

from autosched.errors import DTypeError, TEError
from autosched.te.dtype import check_dtype, is_float
from autosched.te.expr import Call, Cast, Expr, Select, as_expr, binary
from autosched.te.reduce import Reducer, max_reducer, min_reducer

# name -> number of arguments; all take and return floats.
MATH_FUNCS = {
    "exp": 1,
    "log": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "tanh": 1,
    "sigmoid": 1,
    "erf": 1,
    "abs": 1,
    "pow": 2,
    "floor": 1,
    "ceil": 1,
}


def call(func: str, *args: Any) -> Call:
    """A math call; arguments must share one float dtype (abs also takes integers)."""
    if func not in MATH_FUNCS:
        raise TEError(f"unknown math function {func!r}; known: {', '.join(sorted(MATH_FUNCS))}")
    if len(args) != MATH_FUNCS[func]:
        raise TEError(f"{func} takes {MATH_FUNCS[func]} argument(s), got {len(args)}")
    exprs = [as_expr(a) for a in args]
    first = next((e for e in exprs if isinstance(args[exprs.index(e)], Expr)), exprs[0])
    exprs = [as_expr(a, first.dtype) for a in args]
    for e in exprs:
        if e.dtype != first.dtype:
            raise DTypeError(f"{func}: arguments have different dtypes ({first.dtype}, {e.dtype})")
    if not is_float(first.dtype) and func != "abs":
        raise DTypeError(
            f"{func} needs a float argument, got {first.dtype}: {first!r}; cast it first"
        )
    return Call(func, exprs, first.dtype)


def exp(x: Any) -> Call:
    return call("exp", x)


def log(x: Any) -> Call:
    return call("log", x)


def sqrt(x: Any) -> Call:
    return call("sqrt", x)


def rsqrt(x: Any) -> Call:
    return call("rsqrt", x)


def tanh(x: Any) -> Call:
    return call("tanh", x)


def sigmoid(x: Any) -> Call:
    return call("sigmoid", x)


def erf(x: Any) -> Call:
    return call("erf", x)


def abs(x: Any) -> Call:
    return call("abs", x)  # noqa: A001


def pow(x: Any, y: Any) -> Call:
    return call("pow", x, y)  # noqa: A001


def floor(x: Any) -> Call:
    return call("floor", x)


def ceil(x: Any) -> Call:
    return call("ceil", x)


def if_then_else(cond: Any, t: Any, f: Any) -> Select:
    """`t` where `cond` holds, else `f` (the untaken side is never evaluated out of bounds)."""
    return Select(cond, t, f, style="if_then_else")


def select(cond: Any, t: Any, f: Any) -> Select:
    """Like if_then_else (kept for TVM's spelling)."""
    return Select(cond, t, f, style="Select")


def all(*conds: Any) -> Expr:  # noqa: A001
    """Logical and of conditions."""
    if not conds:
        raise TEError("te.all needs at least one condition")
    out = as_expr(conds[0], "bool")
    for c in conds[1:]:
        out = binary("&&", out, c)
    return out


def any(*conds: Any) -> Expr:  # noqa: A001
    """Logical or of conditions."""
    if not conds:
        raise TEError("te.any needs at least one condition")
    out = as_expr(conds[0], "bool")
    for c in conds[1:]:
        out = binary("||", out, c)
    return out


def cast(x: Any, dtype: str) -> Cast:
    """Convert `x` to `dtype`."""
    return Cast(check_dtype(dtype), x)


def floordiv(a: Any, b: Any) -> Expr:
    return binary("floordiv", a, b)


def floormod(a: Any, b: Any) -> Expr:
    return binary("floormod", a, b)


def _reduce_or_binary(name: str, reducer: Reducer, a: Any, b: Any, axis: Any, where: Any) -> Expr:
    """`name(a, b)` elementwise, or `name(expr, axis=k)` as a reduction with `reducer`."""
    if axis is not None:
        if b is not None:
            raise TEError(f"te.{name}: give either two expressions or one expression and axis=")
        return reducer(a, axis, where)
    if b is None:
        raise TEError(f"te.{name}(expr) needs axis= (reduction) or a second operand (elementwise)")
    return binary(name, a, b)


def max(a: Any, b: Any = None, axis: Any = None, where: Any = None) -> Expr:  # noqa: A001
    """`max(a, b)` elementwise, or `max(expr, axis=k)` as a reduction."""
    return _reduce_or_binary("max", max_reducer, a, b, axis, where)


def min(a: Any, b: Any = None, axis: Any = None, where: Any = None) -> Expr:  # noqa: A001
    """`min(a, b)` elementwise, or `min(expr, axis=k)` as a reduction."""
    return _reduce_or_binary("min", min_reducer, a, b, axis, where)


def max_value(dtype: str) -> Expr:
    """The largest value of `dtype` (inf for floats)."""
    return min_reducer.identity(check_dtype(dtype))


def min_value(dtype: str) -> Expr:
    """The smallest value of `dtype` (-inf for floats)."""
    return max_reducer.identity(check_dtype(dtype))
