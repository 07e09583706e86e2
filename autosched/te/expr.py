"""Immutable, hashable expression trees with operator overloading.

Every node carries a `dtype` and a structural key: two expressions are structurally equal when
their keys are equal (variables and buffers compare by identity). `a == b` builds a comparison
node, as in TVM; using that node as a Python bool compares the two sides structurally, so
expressions work as dict keys and in `in` tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from autosched.errors import DTypeError, TEError
from autosched.te.dtype import INT_DTYPES as _INT_DTYPES
from autosched.te.dtype import check_dtype, is_float, is_int


class Combiner(Protocol):
    """What a Reduce node needs of its reducer (`te.reduce.Reducer` is one; it builds Reduce
    nodes, so this module names it by the protocol instead of importing it)."""

    name: str

    def combine(self, a: Expr, b: Expr) -> Expr: ...

    def identity(self, dtype: str) -> Const: ...


ARITH_OPS = ("+", "-", "*", "/", "floordiv", "floormod", "min", "max")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("&&", "||")


class Expr:
    """Base class of expression nodes."""

    __slots__ = ("dtype", "_key", "_hash")

    def __init__(self, dtype: str, key: tuple) -> None:
        self.dtype = dtype
        self._key = key
        self._hash: int | None = None

    # ---- tree structure (what `te.visitor` walks and rewrites) ----------------------------
    def children(self) -> tuple[Expr, ...]:
        """The direct sub-expressions, in a fixed order (a leaf has none)."""
        return ()

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        """This node with its children replaced by `kids` (as many, in `children()` order);
        the constructors re-check dtypes, nothing more. A leaf returns itself."""
        return self

    # ---- structural identity -------------------------------------------------------------
    def same_as(self, other: Expr) -> bool:
        """Structural equality (what `bool(a == b)` also answers)."""
        return self is other or (isinstance(other, Expr) and self._key == other._key)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(self._key)
        return h

    def __bool__(self) -> bool:
        raise TEError(
            f"cannot use the expression {self!r} as a Python bool; "
            "use te.if_then_else / te.select to branch inside an expression"
        )

    # ---- arithmetic ------------------------------------------------------------------------
    def __add__(self, o: Any) -> Expr:
        return binary("+", self, o)

    def __radd__(self, o: Any) -> Expr:
        return binary("+", o, self)

    def __sub__(self, o: Any) -> Expr:
        return binary("-", self, o)

    def __rsub__(self, o: Any) -> Expr:
        return binary("-", o, self)

    def __mul__(self, o: Any) -> Expr:
        return binary("*", self, o)

    def __rmul__(self, o: Any) -> Expr:
        return binary("*", o, self)

    def __truediv__(self, o: Any) -> Expr:
        return binary("/", self, o)

    def __rtruediv__(self, o: Any) -> Expr:
        return binary("/", o, self)

    def __floordiv__(self, o: Any) -> Expr:
        return binary("floordiv", self, o)

    def __rfloordiv__(self, o: Any) -> Expr:
        return binary("floordiv", o, self)

    def __mod__(self, o: Any) -> Expr:
        return binary("floormod", self, o)

    def __rmod__(self, o: Any) -> Expr:
        return binary("floormod", o, self)

    def __neg__(self) -> Expr:
        return binary("-", const(0, self.dtype), self)

    # ---- comparisons and logic -------------------------------------------------------------
    def __lt__(self, o: Any) -> Expr:
        return binary("<", self, o)

    def __le__(self, o: Any) -> Expr:
        return binary("<=", self, o)

    def __gt__(self, o: Any) -> Expr:
        return binary(">", self, o)

    def __ge__(self, o: Any) -> Expr:
        return binary(">=", self, o)

    # `==` and `!=` build comparison nodes (Expr), or answer a plain bool for mismatched
    # dtypes, hence the Any result.
    def __eq__(self, o: object) -> Any:
        if not isinstance(o, (Expr, int, float, bool)):
            return NotImplemented
        try:
            return binary("==", self, o)
        except DTypeError:
            return False

    def __ne__(self, o: object) -> Any:
        if not isinstance(o, (Expr, int, float, bool)):
            return NotImplemented
        try:
            return binary("!=", self, o)
        except DTypeError:
            return True

    def __and__(self, o: Any) -> Expr:
        return binary("&&", self, o)

    def __rand__(self, o: Any) -> Expr:
        return binary("&&", o, self)

    def __or__(self, o: Any) -> Expr:
        return binary("||", self, o)

    def __ror__(self, o: Any) -> Expr:
        return binary("||", o, self)

    def __invert__(self) -> Expr:
        return Not(self)

    def astype(self, dtype: str) -> Expr:
        """Cast this expression to `dtype`."""
        return Cast(dtype, self)

    def __repr__(self) -> str:
        return _text_form(self)


class Const(Expr):
    """A literal (TVM's IntImm / FloatImm)."""

    __slots__ = ("value",)

    def __init__(self, value: Any, dtype: str) -> None:
        dtype = check_dtype(dtype)
        if type(value) is int and dtype in _INT_DTYPES:  # the common case, nothing to convert
            pass
        elif dtype == "bool":
            value = bool(value)
        elif is_int(dtype):
            if isinstance(value, float) and not float(value).is_integer():
                raise DTypeError(f"the literal {value} is not an integer but the dtype is {dtype}")
            value = int(value)
        else:
            value = float(value)
        # Expr.__init__'s three fields set here directly, as BinOp does: the simplifier makes a
        # literal for every coefficient and offset it writes out
        self.dtype = dtype
        self._key = ("c", dtype, value)
        self._hash = None
        self.value = value


class Var(Expr):
    """A variable, compared by identity (two variables named `i` are different)."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str = "int32") -> None:
        super().__init__(check_dtype(dtype), ("v", id(self)))
        self.name = name


class IterVar(Var):
    """An iteration axis of a compute: a variable with a range [lo, lo + extent) and a kind."""

    __slots__ = ("lo", "extent", "kind")

    SPATIAL = "spatial"
    REDUCE = "reduce"

    def __init__(self, name: str, lo: int, extent: int, kind: str) -> None:
        super().__init__(name, "int32")
        if int(extent) <= 0:
            raise TEError(f"axis {name!r} has extent {extent}; extents must be positive")
        self.lo = int(lo)
        self.extent = int(extent)
        self.kind = kind

    @property
    def var(self) -> IterVar:
        return self


class BinOp(Expr):
    """A binary operation; `op` is one of ARITH_OPS, COMPARE_OPS or LOGIC_OPS."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr, dtype: str) -> None:
        # Expr.__init__'s three fields set here directly: lowering builds many of these nodes
        self.dtype = dtype
        self._key = ("b", op, a._key, b._key)
        self._hash = None
        self.op = op
        self.a = a
        self.b = b

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        a, b = kids
        return BinOp(self.op, a, b, "bool" if self.dtype == "bool" else a.dtype)

    def __bool__(self) -> bool:
        if self.op == "==":
            return self.a.same_as(self.b)
        if self.op == "!=":
            return not self.a.same_as(self.b)
        return Expr.__bool__(self)


class Not(Expr):
    __slots__ = ("a",)

    def __init__(self, a: Any) -> None:
        a = as_expr(a, "bool")
        if a.dtype != "bool":
            raise DTypeError(f"logical not needs a bool operand, got {a.dtype} in {a!r}")
        super().__init__("bool", ("!", a._key))
        self.a = a

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        return Not(kids[0])


class Select(Expr):
    """`cond ? t : f`. `style` only changes printing: 'if_then_else' or 'select'."""

    __slots__ = ("cond", "t", "f", "style")

    def __init__(self, cond: Any, t: Any, f: Any, style: str = "if_then_else") -> None:
        cond = as_expr(cond, "bool")
        if cond.dtype != "bool":
            raise DTypeError(f"the condition of {style} must be bool, got {cond.dtype}: {cond!r}")
        t, f = _unify(t, f, style)
        super().__init__(t.dtype, ("s", cond._key, t._key, f._key))
        self.cond, self.t, self.f, self.style = cond, t, f, style

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.t, self.f)

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        cond, t, f = kids
        return Select(cond, t, f, style=self.style)


class Cast(Expr):
    __slots__ = ("value",)

    def __init__(self, dtype: str, value: Any) -> None:
        dtype = check_dtype(dtype)
        value = as_expr(value, dtype)
        super().__init__(dtype, ("cast", dtype, value._key))
        self.value = value

    def children(self) -> tuple[Expr, ...]:
        return (self.value,)

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        return Cast(self.dtype, kids[0])


class Call(Expr):
    """A call of a math function by name (`exp`, `sqrt`, ...); see MATH_FUNCS in ops.py."""

    __slots__ = ("func", "args")

    def __init__(self, func: str, args: Sequence[Expr], dtype: str) -> None:
        args = tuple(args)
        super().__init__(dtype, ("call", func, tuple(a._key for a in args)))
        self.func = func
        self.args = args

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        return Call(self.func, kids, kids[0].dtype if kids else self.dtype)


class Load(Expr):
    """Reading `buffer[indices]`; the buffer is a te.Tensor or a lowered IR buffer."""

    __slots__ = ("buffer", "indices")

    def __init__(self, buffer: Any, indices: Sequence[Expr]) -> None:
        indices = tuple(indices)
        # Expr.__init__'s fields set directly, as BinOp does: lowering maps every load it emits
        self.dtype = buffer.dtype
        self._key = ("ld", id(buffer), tuple([i._key for i in indices]))
        self._hash = None
        self.buffer = buffer
        self.indices = indices

    def children(self) -> tuple[Expr, ...]:
        return self.indices

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        return Load(self.buffer, kids)


class Reduce(Expr):
    """A commutative reduction of `source` over `axes` (only as the top of a compute body)."""

    __slots__ = ("reducer", "source", "axes", "condition")

    def __init__(
        self, reducer: Combiner, source: Expr, axes: Sequence[IterVar], condition: Expr | None
    ) -> None:
        axes = tuple(axes)
        cond_key = condition._key if condition is not None else None
        key = ("red", reducer.name, id(reducer), source._key, tuple(id(a) for a in axes), cond_key)
        super().__init__(source.dtype, key)
        self.reducer = reducer
        self.source = source
        self.axes = axes
        self.condition = condition

    def children(self) -> tuple[Expr, ...]:
        return (self.source,) if self.condition is None else (self.source, self.condition)

    def with_children(self, kids: Sequence[Expr]) -> Expr:
        cond = kids[1] if len(kids) > 1 else None
        return Reduce(self.reducer, kids[0], self.axes, cond)

    @property
    def identity(self) -> Const:
        return self.reducer.identity(self.dtype)


# ---- construction helpers ------------------------------------------------------------------


def const(value: Any, dtype: str | None = None) -> Const:
    """A literal; the dtype defaults to int32 / float32 / bool from the Python type."""
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32"
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise TEError(f"cannot make a literal of {value!r} ({type(value).__name__})")
    return Const(value, dtype)


def as_expr(value: Any, like: str | None = None) -> Expr:
    """Turn a Python scalar into a literal of dtype `like` (an int literal joins a float side)."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "_as_expr"):  # a Tensor of rank 0, say
        return value._as_expr()
    if isinstance(value, bool):
        return Const(value, "bool")
    if isinstance(value, int):
        return Const(value, like if like is not None and like != "bool" else "int32")
    if isinstance(value, float):
        if like is not None and not is_float(like):
            raise DTypeError(
                f"cannot combine a {like} expression with the float literal {value}; "
                "cast one side explicitly"
            )
        return Const(value, like or "float32")
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return as_expr(value.item(), like)
    except ImportError:  # pragma: no cover
        pass
    raise TEError(f"cannot use {value!r} ({type(value).__name__}) in a tensor expression")


def _unify(a: Any, b: Any, what: str) -> tuple[Expr, Expr]:
    if isinstance(a, Expr) or not isinstance(b, Expr):
        a = as_expr(a)
        b = as_expr(b, a.dtype)
    else:
        b = as_expr(b)
        a = as_expr(a, b.dtype)
    if a.dtype != b.dtype:
        raise DTypeError(
            f"dtype mismatch in {what}: {a!r} is {a.dtype} but {b!r} is {b.dtype}; "
            "cast one side with te.cast / .astype"
        )
    return a, b


def binary(op: str, a: Any, b: Any) -> Expr:
    """Build a binary node, checking dtypes."""
    a, b = _unify(a, b, f"'{op}'")
    if op in ARITH_OPS:
        if a.dtype == "bool":
            raise DTypeError(f"arithmetic '{op}' on bool operands: {a!r}, {b!r}")
        if op == "/" and is_int(a.dtype):
            raise DTypeError(
                f"'/' on integers is ambiguous ({a!r} / {b!r}); use te.floordiv (//) or cast"
            )
        return BinOp(op, a, b, a.dtype)
    if op in COMPARE_OPS:
        return BinOp(op, a, b, "bool")
    if op in LOGIC_OPS:
        if a.dtype != "bool":
            raise DTypeError(f"logical '{op}' needs bool operands, got {a.dtype}: {a!r}")
        return BinOp(op, a, b, "bool")
    raise TEError(f"unknown binary operator {op!r}")


def _class_name(e: Expr) -> str:
    return f"<{type(e).__name__}>"


# how `repr` shows an expression: te/expr_text.py registers TVM's text form when it is imported
# (it needs every node class above), and importing `autosched.te` imports it
_text_form: Callable[[Expr], str] = _class_name


def register_text_form(form: Callable[[Expr], str]) -> None:
    """Make `form` the text `repr` gives every expression."""
    global _text_form
    _text_form = form
