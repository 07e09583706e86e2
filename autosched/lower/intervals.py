"""Symbolic intervals for bound inference: the range an index takes while some loop variables
run over their bounds and the others stay fixed.

An interval is `(lo, span)`: `lo` an expression of the fixed variables, `span` an int, so the
index lies in `lo .. lo + span`. None stands for an index that cannot be bounded this way.
"""

from __future__ import annotations

from autosched.lower.arith import (
    INF,
    Affine,
    MemoBounds,
    atom_bounds,
    simplify,
    to_affine,
)
from autosched.lower.digit_folding import fold_digits
from autosched.lower.ir import I32
from autosched.te.expr import BinOp, Const, Expr
from autosched.te.visitor import free_vars

Interval = tuple[Expr, int]


def depends_on(e: Expr, var_ids: set[int]) -> bool:
    """True when `e` reads a variable whose id is in `var_ids`."""
    return any(id(v) in var_ids for v in free_vars(e))


def interval(
    e: Expr, relaxed: dict[int, tuple[int, int]], memo: MemoBounds | None = None
) -> Interval | None:
    """(lo, span) of `e` when the `relaxed` vars range over their bounds and all other vars
    are fixed; lo is an expression of the fixed vars. None when it cannot be bounded. The
    digits of one value are folded first (`digit_folding.fold_digits`): a fused loop's decomposition
    recombined into the fused index (an implicit GEMM's epilogue reading its product at
    `(n*OH + y)*OW + x`) has the fused loop's exact range, not each digit's whole one.

    Nothing here is simplified under variable bounds, so one `memo` (an empty MemoBounds) may
    serve every interval of a stage's loads, which share their root values' sub-expressions;
    by default each call has its own."""
    memo = MemoBounds({}) if memo is None else memo
    aff = to_affine(fold_digits(simplify(e, memo), memo), memo)
    sym: dict = {}
    lo_num, hi_num = aff.const, aff.const
    for key, (c, atom) in aff.terms.items():
        free = free_vars(atom)
        if not any(id(v) in relaxed for v in free):
            sym[key] = [c, atom]
            continue
        if all(id(v) in relaxed for v in free):
            alo, ahi = atom_bounds(atom, relaxed)
        elif isinstance(atom, BinOp) and atom.op == "floordiv" and isinstance(atom.b, Const):
            inner = interval(atom.a, relaxed, memo)
            if inner is None:
                return None
            k = atom.b.value
            sub = BinOp("floordiv", inner[0], atom.b, I32)
            sym[sub._key] = [c, sub]
            alo, ahi = 0, inner[1] // k + 1
        elif isinstance(atom, BinOp) and atom.op == "floormod" and isinstance(atom.b, Const):
            alo, ahi = 0, atom.b.value - 1
        else:
            return None
        if alo == -INF or ahi == INF:
            return None
        if c > 0:
            lo_num, hi_num = lo_num + c * alo, hi_num + c * ahi
        else:
            lo_num, hi_num = lo_num + c * ahi, hi_num + c * alo
    lo = simplify(Affine(sym, int(lo_num)).to_expr(), memo)
    return lo, int(hi_num - lo_num)


def union(items: list[Interval | None]) -> Interval | None:
    """The smallest interval holding all `items`; None when any is unbounded or two lower ends
    differ by a non-constant amount."""
    bounded = [x for x in items if x is not None]
    if not items or len(bounded) < len(items):
        return None
    lo0, span0 = bounded[0]
    lo_off, hi_off = 0, span0
    for lo, span in bounded[1:]:
        d = simplify(BinOp("-", lo, lo0, I32))
        if not isinstance(d, Const):
            return None
        lo_off = min(lo_off, d.value)
        hi_off = max(hi_off, d.value + span)
    lo = simplify(BinOp("+", lo0, Const(lo_off, I32), I32)) if lo_off else lo0
    return lo, hi_off - lo_off
