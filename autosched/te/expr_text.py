"""The text form of tensor expressions, in the style TVM prints them (`(yy + ry)`, `(a*b)`,
`max(x, 0f)`): what `Expr.__repr__`, the IR printer and the verifiers' messages show."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosched.te.dtype import is_float
from autosched.te.expr import (
    BinOp,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Not,
    Reduce,
    Select,
    Var,
    register_text_form,
)

FUNCTION_STYLE = {"floordiv", "floormod", "min", "max"}
CONST_SUFFIX = {
    "float32": "f",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "",
}


def const_str(c: Const) -> str:
    if c.dtype == "bool":
        return "True" if c.value else "False"
    if is_float(c.dtype):
        v = c.value
        text = str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else repr(v)
        return text + CONST_SUFFIX[c.dtype]
    return str(c.value) + CONST_SUFFIX[c.dtype]


def _binop(e: BinOp) -> str:
    a, b = expr_str(e.a), expr_str(e.b)
    if e.op in FUNCTION_STYLE:
        return f"{e.op}({a}, {b})"
    if e.op == "*":
        return f"({a}*{b})"
    return f"({a} {e.op} {b})"


def _reduce(e: Reduce) -> str:
    axes = ", ".join(a.name for a in e.axes)
    cond = f", where={expr_str(e.condition)}" if e.condition is not None else ""
    return f"reduce({e.reducer.name}, {expr_str(e.source)}, axis=[{axes}]{cond})"


# node type -> its text; each printer takes a node of the type it is listed under
PRINTERS: dict[type[Expr], Callable[[Any], str]] = {
    Const: const_str,
    BinOp: _binop,
    Not: lambda e: f"!{expr_str(e.a)}",
    Select: lambda e: f"tir.{e.style}({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})",
    Cast: lambda e: f"{e.dtype}({expr_str(e.value)})",
    Call: lambda e: f"tir.{e.func}({', '.join(expr_str(a) for a in e.args)})",
    Load: lambda e: f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]",
    Reduce: _reduce,
}


def expr_str(e: Expr) -> str:
    """Render an expression as text."""
    if isinstance(e, Var):
        return e.name
    printer = PRINTERS.get(type(e))
    if printer is None:
        for cls, fn in PRINTERS.items():
            if isinstance(e, cls):
                return fn(e)
        return f"<{type(e).__name__}>"
    return printer(e)


register_text_form(expr_str)
