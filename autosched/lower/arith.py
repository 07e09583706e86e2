"""Integer index arithmetic: canonical affine form, bounds, and div/mod elimination.

`simplify(e, bounds)` rewrites an integer expression into a sum of terms with constant
coefficients plus a constant, folds constants, and removes floordiv/floormod that the known
variable ranges make redundant (the recomposition `(i_o*8 + i_i) // 8 -> i_o` that split/fuse
indexing produces). `bounds` maps id(var) -> (lo, hi), inclusive.
The digits of one value are folded back together in `digit_folding`.
"""

from __future__ import annotations

from collections.abc import Callable

from autosched.te.expr import BinOp, Cast, Const, Expr, Not, Select, Var
from autosched.te.visitor import children, rebuild

Bounds = dict[int, tuple[int, int]]
_INT_DTYPES = ("int32", "int64")
INF = float("inf")


class Affine:
    """sum(coeff * atom) + const over int atoms (Vars or opaque non-linear terms).

    No coefficient is zero, and an Affine is never changed once made: the operations build new
    ones and may share the (coeff, atom) pairs of their operands."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict | None = None, const: int = 0) -> None:
        self.terms: dict = {} if terms is None else terms  # atom key -> (coeff, atom expr)
        self.const = const

    @staticmethod
    def atom(e: Expr) -> Affine:
        return _form({e._key: (1, e)}, 0)

    def add(self, other: Affine, sign: int = 1) -> Affine:
        """self + sign * other (terms in the order of self, then those new in other)."""
        if not other.terms:  # a constant: the terms are self's (shared, as neither changes)
            return _form(self.terms, self.const + sign * other.const)
        if not self.terms:  # a constant plus a form (an index's base 0 plus its offset)
            terms = other.terms if sign == 1 else {k: (-c, a) for k, (c, a) in other.terms.items()}
            return _form(terms, self.const + sign * other.const)
        terms = dict(self.terms)
        for k, (c, a) in other.terms.items():
            got = terms.get(k)
            if got is None:
                if c:
                    terms[k] = (sign * c, a)
                continue
            total = got[0] + sign * c
            if total:
                terms[k] = (total, got[1])
            else:
                del terms[k]
        return _form(terms, self.const + sign * other.const)

    def scale(self, f: int) -> Affine:
        if f == 1:
            return self
        if f == 0:
            return _form({}, 0)
        return _form({k: (c * f, a) for k, (c, a) in self.terms.items()}, self.const * f)

    def is_const(self) -> bool:
        return not self.terms

    def is_multiple_of(self, m: int) -> bool:
        """Every coefficient and the constant are multiples of `m`: the form is one for all
        values of its atoms."""
        return self.const % m == 0 and all(c % m == 0 for c, _ in self.terms.values())

    def to_expr(self, dtype: str = "int32") -> Expr:
        out: Expr | None = None
        for c, a in self.terms.values():
            term = a if c == 1 else BinOp("*", a, Const(c, dtype), dtype) if c > 0 else None
            if term is None:  # negative coefficient: subtract
                neg = a if c == -1 else BinOp("*", a, Const(-c, dtype), dtype)
                out = (
                    BinOp("-", out, neg, dtype)
                    if out is not None
                    else BinOp("*", a, Const(c, dtype), dtype)
                )
                continue
            out = term if out is None else BinOp("+", out, term, dtype)
        if out is None:
            return Const(self.const, dtype)
        if self.const > 0:
            return BinOp("+", out, Const(self.const, dtype), dtype)
        if self.const < 0:
            return BinOp("-", out, Const(-self.const, dtype), dtype)
        return out


_new_object = object.__new__


def _form(terms: dict, const: int) -> Affine:
    """`Affine(terms, const)` without the call of `__init__`: the simplifier makes an Affine for
    every node of every index it reads."""
    form = _new_object(Affine)
    form.terms = terms
    form.const = const
    return form


def atom_bounds(a: Expr, bounds: Bounds) -> tuple[float, float]:
    """Inclusive integer bounds of an atom (a Var or a non-linear term)."""
    if isinstance(a, Var):
        return bounds.get(id(a), (-INF, INF))
    if isinstance(a, BinOp):
        if a.op in ("floordiv", "floormod") and isinstance(a.b, Const) and a.b.value > 0:
            lo, hi = expr_bounds(a.a, bounds)
            c = a.b.value
            if a.op == "floordiv":
                return (lo // c if lo != -INF else -INF, hi // c if hi != INF else INF)
            if lo != -INF and hi != INF and lo // c == hi // c:
                return (lo % c, hi % c)
            return (0, c - 1)
        if a.op in ("min", "max"):
            la, ha = expr_bounds(a.a, bounds)
            lb, hb = expr_bounds(a.b, bounds)
            f = min if a.op == "min" else max
            return (f(la, lb), f(ha, hb))
        if a.op == "*":
            la, ha = expr_bounds(a.a, bounds)
            lb, hb = expr_bounds(a.b, bounds)
            if INF in (ha, hb) or -INF in (la, lb):
                return (-INF, INF)
            prods = [la * lb, la * hb, ha * lb, ha * hb]
            return (min(prods), max(prods))
    if isinstance(a, Select):
        lt, ht = expr_bounds(a.t, bounds)
        lf, hf = expr_bounds(a.f, bounds)
        return (min(lt, lf), max(ht, hf))
    return (-INF, INF)


_UNBOUNDED = (-INF, INF)


def affine_bounds(aff: Affine, bounds: Bounds) -> tuple[float, float]:
    lo = hi = aff.const
    for c, a in aff.terms.values():
        # a loop variable's bounds looked up here (`atom_bounds` for the other atoms)
        alo, ahi = bounds.get(id(a), _UNBOUNDED) if type(a) is Var else atom_bounds(a, bounds)
        if c > 0:
            lo, hi = lo + c * alo, hi + c * ahi
        else:
            lo, hi = lo + c * ahi, hi + c * alo
    return lo, hi


def expr_bounds(e: Expr, bounds: Bounds) -> tuple[float, float]:
    """Inclusive bounds of an integer expression (±inf when unknown)."""
    if isinstance(e, Const):
        return (e.value, e.value)
    return affine_bounds(to_affine(e, bounds), bounds)


def affine_div_or_mod(aff: Affine, c: int, op: str, bounds: Bounds, dtype: str) -> Affine:
    """floordiv/floormod of an affine form by a positive constant, eliminated when possible."""
    if aff.is_const():
        return _form({}, aff.const // c if op == "floordiv" else aff.const % c)
    # Split into a part divisible by c and a remainder r; if r's range sits in one period,
    # the division is exact on the divisible part.
    div_terms: dict[tuple, tuple[int, Expr]] = {}
    rem_terms: dict[tuple, tuple[int, Expr]] = {}
    for k, term in aff.terms.items():
        (div_terms if term[0] % c == 0 else rem_terms)[k] = term
    q_const, r_const = divmod(aff.const, c)
    rem = _form(rem_terms, r_const)
    rlo, rhi = affine_bounds(rem, bounds)
    if rlo != -INF and rhi != INF and rlo // c == rhi // c:
        k = int(rlo // c)
        if op == "floordiv":
            return _form({key: (coef // c, a) for key, (coef, a) in div_terms.items()}, q_const + k)
        return rem.add(_form({}, k * c), -1) if k else rem
    if op == "floormod" and div_terms:
        # (c*q + r) % c == r % c
        return Affine.atom(BinOp("floormod", rem.to_expr(dtype), Const(c, dtype), dtype))
    # Nested floordiv of floordiv: (x // a) // b == x // (a*b).
    inner = aff.to_expr(dtype)
    if op == "floordiv" and len(aff.terms) == 1 and aff.const == 0:
        ((coef, a),) = aff.terms.values()
        if coef == 1 and isinstance(a, BinOp) and a.op == "floordiv" and isinstance(a.b, Const):
            return Affine.atom(BinOp("floordiv", a.a, Const(a.b.value * c, dtype), dtype))
        if (
            coef == 1
            and op == "floormod"
            and isinstance(a, BinOp)
            and a.op == "floormod"
            and isinstance(a.b, Const)
            and a.b.value % c == 0
        ):
            return Affine.atom(BinOp("floormod", a.a, Const(c, dtype), dtype))
    return Affine.atom(BinOp(op, inner, Const(c, dtype), dtype))


def is_multiple(e: Expr, m: int, bounds: Bounds) -> bool:
    """`e` is provably a multiple of `m` for all values of its variables: its affine form's
    coefficients and constant all are (a sufficient test, not a necessary one)."""
    return to_affine(e, bounds).is_multiple_of(m)


class MemoBounds(dict):
    """Variable bounds (a `Bounds` dict) that remember `to_affine`'s answer per expression
    object while they are in use: a pass that simplifies a whole kernel under one set of bounds
    meets the same index sub-expressions (a split or fused loop's index, its guards) in many
    statements, and the floor-division rules re-derive the forms of their operands.

    The memo is keyed by the object's id and keeps the object alive, so an id is never reused
    while it is remembered; Affine forms are never changed once made, so sharing them is safe.
    The bounds must not change once made (make a new MemoBounds instead)."""

    __slots__ = ("affine",)

    def __init__(self, bounds: Bounds) -> None:
        super().__init__(bounds)
        self.affine: dict[int, tuple[Expr, Affine]] = {}


def to_affine(e: Expr, bounds: Bounds) -> Affine:
    """The affine form of an integer expression (sub-terms simplified); remembered per
    expression object when `bounds` is a MemoBounds."""
    if type(bounds) is not MemoBounds:
        return _to_affine(e, bounds)
    got = bounds.affine.get(id(e))
    if got is not None:
        return got[1]
    aff = _to_affine(e, bounds)
    bounds.affine[id(e)] = (e, aff)
    return aff


def _to_affine(e: Expr, bounds: Bounds) -> Affine:
    """`to_affine` without the memo. The node's class is tested exactly, most frequent first
    (BinOp has no subclasses; Var does: IterVar)."""
    if type(e) is BinOp:
        rule = _AFFINE_RULES.get(e.op)
        if rule is not None:
            return rule(e, bounds)
        return Affine.atom(simplify(e, bounds))
    if type(e) is Const:
        return _form({}, int(e.value))
    if isinstance(e, Var):
        rng = bounds.get(id(e))
        if rng is not None and rng[0] == rng[1]:
            return _form({}, int(rng[0]))
        return Affine.atom(e)
    return Affine.atom(simplify(e, bounds) if children(e) else e)


def _affine_add(e: BinOp, bounds: Bounds) -> Affine:
    return to_affine(e.a, bounds).add(to_affine(e.b, bounds))


def _affine_sub(e: BinOp, bounds: Bounds) -> Affine:
    return to_affine(e.a, bounds).add(to_affine(e.b, bounds), -1)


def _affine_mul(e: BinOp, bounds: Bounds) -> Affine:
    if type(e.b) is Const:  # the usual `x * stride`: what the general case gives, sooner
        return to_affine(e.a, bounds).scale(int(e.b.value))
    a, b = to_affine(e.a, bounds), to_affine(e.b, bounds)
    if a.is_const():
        return b.scale(a.const)
    if b.is_const():
        return a.scale(b.const)
    return Affine.atom(BinOp("*", a.to_expr(e.dtype), b.to_expr(e.dtype), e.dtype))


def _affine_divmod(e: BinOp, bounds: Bounds) -> Affine:
    if type(e.b) is Const and int(e.b.value) > 0:  # the usual `x // c`, `x % c`: as below
        return affine_div_or_mod(to_affine(e.a, bounds), int(e.b.value), e.op, bounds, e.dtype)
    a, b = to_affine(e.a, bounds), to_affine(e.b, bounds)
    if b.is_const() and b.const > 0:
        return affine_div_or_mod(a, b.const, e.op, bounds, e.dtype)
    return Affine.atom(BinOp(e.op, a.to_expr(e.dtype), b.to_expr(e.dtype), e.dtype))


def _affine_min_max(e: BinOp, bounds: Bounds) -> Affine:
    op = e.op
    a, b = to_affine(e.a, bounds), to_affine(e.b, bounds)
    if a.is_const() and b.is_const():
        return _form({}, min(a.const, b.const) if op == "min" else max(a.const, b.const))
    la, ha = affine_bounds(a, bounds)
    lb, hb = affine_bounds(b, bounds)
    if op == "min":
        if ha <= lb:
            return a
        if hb <= la:
            return b
    else:
        if la >= hb:
            return a
        if lb >= ha:
            return b
    return Affine.atom(BinOp(op, a.to_expr(e.dtype), b.to_expr(e.dtype), e.dtype))


# How each integer operator enters the affine form; any other BinOp is an opaque atom.
_AFFINE_RULES: dict[str, Callable[[BinOp, Bounds], Affine]] = {
    "+": _affine_add,
    "-": _affine_sub,
    "*": _affine_mul,
    "floordiv": _affine_divmod,
    "floormod": _affine_divmod,
    "min": _affine_min_max,
    "max": _affine_min_max,
}


COMPARE = {
    "<": lambda lo, hi: True if hi < 0 else False if lo >= 0 else None,
    "<=": lambda lo, hi: True if hi <= 0 else False if lo > 0 else None,
    ">": lambda lo, hi: True if lo > 0 else False if hi <= 0 else None,
    ">=": lambda lo, hi: True if lo >= 0 else False if hi < 0 else None,
    "==": lambda lo, hi: True if lo == hi == 0 else False if lo > 0 or hi < 0 else None,
    "!=": lambda lo, hi: False if lo == hi == 0 else True if lo > 0 or hi < 0 else None,
}


def _fold_div_compare(op: str, diff: Affine, bounds: Bounds) -> Expr | None:
    """`x // c + k OP 0` -> a comparison of x itself (no division in the guard)."""
    if len(diff.terms) != 1 or op not in ("<", "<=", ">", ">="):
        return None
    ((coef, atom),) = diff.terms.values()
    if coef != 1 or not (
        isinstance(atom, BinOp) and atom.op == "floordiv" and isinstance(atom.b, Const)
    ):
        return None
    m, c, x = -diff.const, atom.b.value, atom.a
    limit = {"<": m * c, "<=": (m + 1) * c, ">": (m + 1) * c, ">=": m * c}[op]
    new_op = "<" if op in ("<", "<=") else ">="
    return simplify(BinOp(new_op, x, Const(limit, x.dtype), "bool"), bounds)


def simplify(e: Expr, bounds: Bounds | None = None) -> Expr:
    """Simplify an expression: integer parts to canonical affine form, conditions folded."""
    bounds = {} if bounds is None else bounds  # an empty MemoBounds keeps its memo
    # the most frequent classes first: the passes simplify every expression of a kernel, most
    # of them BinOps and Loads
    if isinstance(e, BinOp):
        op = e.op
        if e.dtype in _INT_DTYPES and op in _AFFINE_RULES:
            return to_affine(e, bounds).to_expr(e.dtype)
        if op in COMPARE and e.a.dtype in _INT_DTYPES:
            return _simplify_compare(e, bounds)
        if op in ("&&", "||"):
            return _simplify_logic(e, bounds)
    elif isinstance(e, Const):
        return e
    elif isinstance(e, Var):
        rng = bounds.get(id(e))
        return Const(int(rng[0]), e.dtype) if rng is not None and rng[0] == rng[1] else e
    elif isinstance(e, Select):
        c = simplify(e.cond, bounds)
        if isinstance(c, Const):
            return simplify(e.t if c.value else e.f, bounds)
        return Select(c, simplify(e.t, bounds), simplify(e.f, bounds), e.style)
    elif isinstance(e, Not):
        a = simplify(e.a, bounds)
        return Const(not a.value, "bool") if isinstance(a, Const) else Not(a)
    kids = e.children()
    if not kids:
        return e
    new = tuple([simplify(k, bounds) for k in kids])
    if isinstance(e, BinOp) and e.op in ("+", "-", "*", "min", "max"):
        if type(new[0]) is Const and type(new[1]) is Const:
            a, b = new[0].value, new[1].value
            val = {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[e.op]
            return Const(val, e.dtype)
    if isinstance(e, Cast) and isinstance(new[0], Const):
        return Const(new[0].value, e.dtype)
    return rebuild(e, new)


def _simplify_compare(e: BinOp, bounds: Bounds) -> Expr:
    """An integer comparison: decided by the bounds of its two sides' difference, or written
    without a division, or with both sides simplified."""
    lhs, rhs = to_affine(e.a, bounds), to_affine(e.b, bounds)
    diff = lhs.add(rhs, -1)
    verdict = COMPARE[e.op](*affine_bounds(diff, bounds))
    if verdict is not None:
        return Const(verdict, "bool")
    folded = _fold_div_compare(e.op, diff, bounds)
    if folded is not None:
        return folded
    return BinOp(e.op, lhs.to_expr(e.a.dtype), rhs.to_expr(e.b.dtype), "bool")


def _simplify_logic(e: BinOp, bounds: Bounds) -> Expr:
    """`&&` / `||` with a side that simplifies to a constant folded away."""
    a, b = simplify(e.a, bounds), simplify(e.b, bounds)
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            if e.op == "&&":
                return y if x.value else Const(False, "bool")
            return Const(True, "bool") if x.value else y
    return BinOp(e.op, a, b, "bool")
