"""The tensor-expression language: placeholders, computes, reductions, elementwise math."""

from .dtype import DTYPES
from .expr import BinOp, Call, Cast, Const, Expr, IterVar, Load, Not, Reduce, Select, Var, const
from .ops import (
    abs, all, any, call, cast, ceil, erf, exp, floor, floordiv, floormod, if_then_else, log, max,
    max_value, min, min_value, pow, rsqrt, select, sigmoid, sqrt, tanh,
)
from .reduce import Reducer, comm_reducer, sum
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor, compute, placeholder, reduce_axis

__all__ = [
    "DTYPES", "BinOp", "Call", "Cast", "Const", "Expr", "IterVar", "Load", "Not", "Reduce",
    "Select", "Var", "const", "abs", "all", "any", "call", "cast", "ceil", "erf", "exp", "floor",
    "floordiv", "floormod", "if_then_else", "log", "max", "max_value", "min", "min_value", "pow",
    "rsqrt", "select", "sigmoid", "sqrt", "tanh", "Reducer", "comm_reducer", "sum", "ComputeOp",
    "Operation", "PlaceholderOp", "Tensor", "compute", "placeholder", "reduce_axis",
]
