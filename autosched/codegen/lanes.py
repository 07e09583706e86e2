"""Lane analysis for `vectorize` loops: is an access contiguous and aligned in the loop's lane,
and is a guard the same for every lane. The CUDA printer (`autosched.codegen.vectors`) prints a
loop that passes as one vector access.

A V-wide access at `index` over `lane` needs `index == base + lane` for every lane in [0, V)
with `base` a multiple of V (then it is aligned to its width: global buffers come from
cudaMalloc, shared arrays are declared `__align__(16)` or more). Two proofs, the first that
holds is used:

- `aligned_unit_stride`: the index is literally `base + lane` after collecting linear terms.
- `split_lane`: a modular analysis that also sees through floordiv/floormod by constants. The
  cooperative fetch of a fused shared tile reads global memory at `(f // c) * stride + f % c`
  with `f = o*128 + ty*64 + tx*V + lane`: when the lane-free part of `f` is a multiple of h and
  `lane <= V - 1 < h`, `(base + lane) // c == base // c` and `(base + lane) % c == base % c + lane`
  (for h = gcd(multiple, c): `base % c` is a multiple of h, so it is at most `c - h`). A padded
  shared tile's `(f // c) * (c + pad) + f % c` passes when the padding keeps rows aligned.

`lane_free_guard` applies the same reasoning to comparisons (`f + lane < 512` holds for every
lane exactly when `f < 512`), so guards of partial fetches and of padded inputs can be tested
once per vector. Nothing here rewrites the program: the device program, the interpreter and the
features see the indices as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autosched.te.expr import BinOp, Const, Expr, Load, Not, Select, Var
from autosched.te.visitor import children, free_vars, substitute

# ---- linear forms: `base + lane` as written ------------------------------------------------


def linear_form(e: Expr) -> tuple[int, dict[tuple, tuple[int, Expr]]]:
    """`e` as `const + sum(coef * atom)`: (const, {atom key: (coef, atom)}). Atoms are variables
    and every sub-expression that is not +, - or multiplication by a literal."""
    if isinstance(e, Const):
        return int(e.value), {}
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        ca, ta = linear_form(e.a)
        cb, tb = linear_form(e.b)
        sign = 1 if e.op == "+" else -1
        terms = dict(ta)
        for k, (c, atom) in tb.items():
            terms[k] = (terms.get(k, (0, atom))[0] + sign * c, atom)
        return ca + sign * cb, {k: v for k, v in terms.items() if v[0] != 0}
    if isinstance(e, BinOp) and e.op == "*":
        for lit, other in ((e.a, e.b), (e.b, e.a)):
            if isinstance(lit, Const):
                const, inner = linear_form(other)
                f = int(lit.value)
                return const * f, {key: (v[0] * f, v[1]) for key, v in inner.items() if v[0] * f}
    return 0, {e._key: (1, e)}


def aligned_unit_stride(index: Expr, var: Var, width: int) -> bool:
    """True when `index` is `base + var` with `base` provably a multiple of `width`."""
    const, terms = linear_form(index)
    if const % width or terms.get(var._key, (0, None))[0] != 1:
        return False
    for key, (coef, atom) in terms.items():
        if key == var._key:
            continue
        if coef % width or any(v is var for v in free_vars(atom)):
            return False
    return True


# ---- modular analysis: `base + coef * lane` through floordiv / floormod ---------------------


@dataclass(frozen=True)
class LaneSplit:
    """`index == base + coef * lane` for every lane in [0, width) and every value of the other
    variables, with `base` a multiple of `multiple` (0: base is 0, a multiple of everything)."""

    base: Expr
    coef: int
    multiple: int


ZERO = Const(0, "int32")


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def _sum(op: str, a: LaneSplit, b: LaneSplit, dtype: str) -> LaneSplit:
    """a + b or a - b; a zero base (a lane-only operand) drops out of the printed base."""
    sign = 1 if op == "+" else -1
    if _is_zero(b.base):
        base = a.base
    elif _is_zero(a.base) and op == "+":
        base = b.base
    else:
        base = BinOp(op, a.base, b.base, dtype)
    return LaneSplit(base, a.coef + sign * b.coef, math.gcd(a.multiple, b.multiple))


def _product(e: BinOp, a: LaneSplit, b: LaneSplit) -> LaneSplit | None:
    for lit, other, x in ((e.a, b, a), (e.b, a, b)):
        if isinstance(lit, Const) and x.coef == 0:
            k = int(lit.value)
            base = ZERO if _is_zero(other.base) or k == 0 else BinOp("*", other.base, lit, e.dtype)
            return LaneSplit(base, other.coef * k, other.multiple * abs(k))
    if a.coef or b.coef:
        return None  # lane times a variable: not affine in the lane
    return LaneSplit(BinOp("*", a.base, b.base, e.dtype), 0, a.multiple * b.multiple)


def _divmod(e: BinOp, a: LaneSplit, width: int) -> LaneSplit | None:
    """floordiv/floormod of `a` by the positive literal c = e.b."""
    assert isinstance(e.b, Const)  # split_lane divides by literals only
    c = int(e.b.value)
    h = math.gcd(a.multiple, c)  # base % c is a multiple of h, so at most c - h
    base = BinOp(e.op, a.base, e.b, e.dtype)
    if a.coef == 0:
        return LaneSplit(base, 0, h if e.op == "floormod" else 1)
    if a.coef < 0 or a.coef * (width - 1) >= h:
        return None  # base + coef * lane may cross a multiple of c
    return LaneSplit(base, 0, 1) if e.op == "floordiv" else LaneSplit(base, a.coef, h)


def split_lane(e: Expr, lane: Var, width: int) -> LaneSplit | None:
    """`e` as `base + coef * lane` for lane in [0, width) (see LaneSplit); None when that
    cannot be proved (the lane under a non-constant product, a min/max, a load, a select,
    a division that a lane may cross)."""
    if e is lane:
        return LaneSplit(ZERO, 1, 0)
    if isinstance(e, Const):
        return LaneSplit(e, 0, abs(int(e.value)))
    if isinstance(e, BinOp) and e.op in ("+", "-", "*", "floordiv", "floormod"):
        if e.op in ("floordiv", "floormod") and not (isinstance(e.b, Const) and e.b.value > 0):
            return _opaque(e, lane)
        a = split_lane(e.a, lane, width)
        b = split_lane(e.b, lane, width)
        if a is None or b is None:
            return None
        split = SPLIT_RULES[e.op](e, a, b, width)
        if split is not None and not _uses(e, lane):  # lane-free: the base as written
            return LaneSplit(e, split.coef, split.multiple)
        return split
    return _opaque(e, lane)


# op -> the split of `e` from the splits of its operands (b of floordiv/floormod: a literal)
SPLIT_RULES = {
    "+": lambda e, a, b, width: _sum("+", a, b, e.dtype),
    "-": lambda e, a, b, width: _sum("-", a, b, e.dtype),
    "*": lambda e, a, b, width: _product(e, a, b),
    "floordiv": lambda e, a, b, width: _divmod(e, a, width),
    "floormod": lambda e, a, b, width: _divmod(e, a, width),
}


def _opaque(e: Expr, lane: Var) -> LaneSplit | None:
    """An expression the analysis does not look into: fine when free of the lane."""
    if any(v is lane for v in free_vars(e)):
        return None
    return LaneSplit(e, 0, 1)


def vector_base(index: Expr, lane: Var, width: int) -> Expr | None:
    """The base of an aligned contiguous `width`-wide access at `index` over `lane` (the index
    at lane 0, `+ lane` terms dropped), or None when it is not provably one."""
    if aligned_unit_stride(index, lane, width):
        return at_zero(index, lane)
    split = split_lane(index, lane, width)
    if split is None or split.coef != 1 or split.multiple % width:
        return None
    return split.base


def at_zero(index: Expr, var: Var) -> Expr:
    """`index` with `var` = 0, dropping a `+ var` term (the base of a vector access)."""
    if isinstance(index, BinOp) and index.op == "+":
        if index.b is var:
            return index.a
        if index.a is var:
            return index.b
    return substitute(index, {var: Const(0, var.dtype)})


# ---- guards: the same for every lane -------------------------------------------------------


def _uses(e: Expr, lane: Var) -> bool:
    return any(v is lane for v in free_vars(e))


def _compare(e: BinOp, lane: Var, width: int) -> Expr | None:
    """`a < b` / `a >= b` with a - b = base + coef * lane (base a multiple of g): the same for
    every lane when 0 <= coef * (width - 1) < g (base < 0 means base <= -g)."""
    a, b = split_lane(e.a, lane, width), split_lane(e.b, lane, width)
    if a is None or b is None or _uses(a.base, lane) or _uses(b.base, lane):
        return None
    coef, g = a.coef - b.coef, math.gcd(a.multiple, b.multiple)
    if coef < 0 or (g and coef * (width - 1) >= g):
        return None  # g == 0: a - b is coef * lane exactly, never negative
    return BinOp(e.op, a.base, b.base, e.dtype)


def is_accumulation(store, lane: Var) -> bool:
    """True when `store` (an `ir.Store`) writes the same element in every lane of the loop
    over `lane`: a loop of reduction steps, each lane adding its term to one accumulator."""
    return not _uses(store.index, lane)


def lane_free_guard(cond: Expr, lane: Var, width: int) -> Expr | None:
    """A condition without `lane` that equals `cond` for every lane in [0, width), or None when
    that is not provable (only `<`, `>=`, `&&`, `||` and `!` are looked into)."""
    if not _uses(cond, lane):
        return cond
    if isinstance(cond, BinOp) and cond.op in ("&&", "||"):
        a = lane_free_guard(cond.a, lane, width)
        b = lane_free_guard(cond.b, lane, width)
        return None if a is None or b is None else BinOp(cond.op, a, b, cond.dtype)
    if isinstance(cond, Not):
        a = lane_free_guard(cond.a, lane, width)
        return None if a is None else Not(a)
    if isinstance(cond, BinOp) and cond.op in ("<", ">=") and cond.a.dtype in INT:
        return _compare(cond, lane, width)
    return None


INT = ("int32", "int64")


def guarded_loads(e: Expr, lane: Var, width: int, guard: Select | None = None):
    """(load, select) for every load of `e` that may be read as one vector: loads evaluated
    whatever the data (select None), and loads in the true branch of a Select whose condition
    is the same for every lane (read when it holds). Not loads in a load's index, in a false
    branch, on the right of && / || (C evaluates it only when needed) or under two Selects."""
    if isinstance(e, Load):
        return [(e, guard)]
    if isinstance(e, Select):
        out = guarded_loads(e.cond, lane, width, guard)
        if guard is None and lane_free_guard(e.cond, lane, width) is not None:
            out += guarded_loads(e.t, lane, width, e)
        return out
    if isinstance(e, BinOp) and e.op in ("&&", "||"):
        return guarded_loads(e.a, lane, width, guard)
    return [x for k in children(e) for x in guarded_loads(k, lane, width, guard)]


__all__ = [
    "LaneSplit",
    "aligned_unit_stride",
    "at_zero",
    "guarded_loads",
    "lane_free_guard",
    "linear_form",
    "split_lane",
    "vector_base",
]
