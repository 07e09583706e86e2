"""Expression helpers of feature extraction: operation counts, linear forms of flat indices,
and integer ranges / values of index terms, each in one pass without building new nodes."""

from __future__ import annotations

from collections.abc import Iterable

from autosched.te.dtype import FLOAT_DTYPES
from autosched.te.expr import BinOp, Call, Cast, Const, Expr, IterVar, Load, Not, Select, Var

# Operation counts, in this order. `*_mad` counts add/sub nodes with a multiply operand (an
# FMA candidate); those adds and multiplies are also counted under addsub and mul.
OP_KINDS = (
    "float_mad",
    "float_addsub",
    "float_mul",
    "float_divmod",
    "float_cmp",
    "float_math",
    "int_mad",
    "int_addsub",
    "int_mul",
    "int_divmod",
    "int_cmp",
    "int_math",
    "bool_op",
    "select_op",
    "cast_op",
)
INT_BASE = 6  # offset of the int_* block
_BOOL, _SELECT, _CAST = 12, 13, 14
FLOAT_COMPUTE = (1, 2, 3, 4, 5)  # float ops that count as compute for arithmetic intensity
_BIN_KIND = {
    "+": 1,
    "-": 1,
    "*": 2,
    "/": 3,
    "floordiv": 3,
    "floormod": 3,
    "min": 4,
    "max": 4,
    "<": 4,
    "<=": 4,
    ">": 4,
    ">=": 4,
    "==": 4,
    "!=": 4,
}
REDUCER_KIND = {"sum": 1, "max": 4, "min": 4}
_LEAF_TYPES = frozenset({Const, Var, IterVar})


def count_ops(roots: Iterable[Expr], counts: list[int], loads: list[Load]) -> None:
    """Add the operations of the trees in `roots` to `counts` (OP_KINDS order; shared subtrees
    count once per use, as the code executes them) and collect their Loads."""
    stack = list(roots)
    pop, push = stack.pop, stack.append
    leaf = _LEAF_TYPES
    while stack:
        e = pop()
        if isinstance(e, BinOp):
            k = _BIN_KIND.get(e.op)
            a, b = e.a, e.b
            if k is None:  # && ||
                counts[_BOOL] += 1
            else:
                base = 0 if a.dtype in FLOAT_DTYPES else INT_BASE
                counts[base + k] += 1
                if k == 1 and (
                    (isinstance(a, BinOp) and a.op == "*") or (isinstance(b, BinOp) and b.op == "*")
                ):
                    counts[base] += 1
            if type(a) not in leaf:
                push(a)
            if type(b) not in leaf:
                push(b)
        elif type(e) in leaf:
            continue
        elif isinstance(e, Load):
            loads.append(e)
            stack.extend(e.indices)
        elif isinstance(e, Select):
            counts[_SELECT] += 1
            push(e.cond)
            push(e.t)
            push(e.f)
        elif isinstance(e, Cast):
            counts[_CAST] += 1
            push(e.value)
        elif isinstance(e, Call):
            counts[5 if e.dtype in FLOAT_DTYPES else INT_BASE + 5] += 1
            stack.extend(e.args)
        elif isinstance(e, Not):
            counts[_BOOL] += 1
            push(e.a)


def linearize(e: Expr, scale: int, terms: dict[int, int], atoms: list[tuple[int, Expr]]) -> int:
    """Accumulate `scale * e` as linear terms {var id: coefficient} and non-linear atoms
    [(coefficient, expr)]; return the constant part."""
    if isinstance(e, Const):
        return scale * e.value
    if isinstance(e, BinOp):
        op = e.op
        if op == "+":
            return linearize(e.a, scale, terms, atoms) + linearize(e.b, scale, terms, atoms)
        if op == "-":
            return linearize(e.a, scale, terms, atoms) + linearize(e.b, -scale, terms, atoms)
        if op == "*":
            if isinstance(e.b, Const):
                return linearize(e.a, scale * e.b.value, terms, atoms)
            if isinstance(e.a, Const):
                return linearize(e.b, scale * e.a.value, terms, atoms)
    elif isinstance(e, Var):
        k = id(e)
        terms[k] = terms.get(k, 0) + scale
        return 0
    atoms.append((scale, e))
    return 0


def var_ids(e: Expr, out: set[int]) -> set[int]:
    """Add the ids of the variables `e` uses to `out`; return it."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out.add(id(x))
        else:
            stack.extend(x.children())
    return out


def interval(e: Expr, hi_of: dict[int, int]) -> tuple[int, int]:
    """Integer range of `e` when each loop variable v in `hi_of` runs over 0..hi_of[id(v)] and
    every other variable is 0. Unknown nodes count as a point."""
    if isinstance(e, Const):
        v = int(e.value)
        return v, v
    if isinstance(e, BinOp):
        op = e.op
        alo, ahi = interval(e.a, hi_of)
        if op in ("floordiv", "floormod") and isinstance(e.b, Const) and e.b.value > 0:
            c = e.b.value
            if op == "floordiv":
                return alo // c, ahi // c
            if alo // c == ahi // c:
                return alo % c, ahi % c
            return 0, c - 1
        blo, bhi = interval(e.b, hi_of)
        if op == "+":
            return alo + blo, ahi + bhi
        if op == "-":
            return alo - bhi, ahi - blo
        if op == "*":
            p = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
            return min(p), max(p)
        if op == "min":
            return min(alo, blo), min(ahi, bhi)
        if op == "max":
            return max(alo, blo), max(ahi, bhi)
        return min(alo, blo), max(ahi, bhi)
    if isinstance(e, Var):
        return 0, hi_of.get(id(e), 0)
    if isinstance(e, Select):
        tlo, thi = interval(e.t, hi_of)
        flo, fhi = interval(e.f, hi_of)
        return min(tlo, flo), max(thi, fhi)
    if isinstance(e, Cast):
        return interval(e.value, hi_of)
    return 0, 0


def eval_pair(e: Expr, vid: int, val: int) -> tuple[int, int]:
    """Values of an integer expression with every variable 0, and with the variable of id
    `vid` set to `val` (the others still 0); one pass for both."""
    if isinstance(e, Const):
        v = int(e.value)
        return v, v
    if isinstance(e, BinOp):
        a0, a1 = eval_pair(e.a, vid, val)
        b0, b1 = eval_pair(e.b, vid, val)
        op = e.op
        if op == "+":
            return a0 + b0, a1 + b1
        if op == "-":
            return a0 - b0, a1 - b1
        if op == "*":
            return a0 * b0, a1 * b1
        if op == "floordiv":
            return (a0 // b0 if b0 else 0), (a1 // b1 if b1 else 0)
        if op == "floormod":
            return (a0 % b0 if b0 else 0), (a1 % b1 if b1 else 0)
        if op == "min":
            return min(a0, b0), min(a1, b1)
        if op == "max":
            return max(a0, b0), max(a1, b1)
        return 0, 0
    if isinstance(e, Var):
        return (0, val) if id(e) == vid else (0, 0)
    if isinstance(e, Select):
        return eval_pair(e.t, vid, val)
    if isinstance(e, Cast):
        return eval_pair(e.value, vid, val)
    return 0, 0
