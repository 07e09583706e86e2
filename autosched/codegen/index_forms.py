"""Facts about the index expressions the printer prints: which are provably non-negative
(`is_nonneg`), and how an element of a shared buffer is printed inside unrolled loops
(`split_unrolled`): as a constant offset from a pointer that is the same in every unrolled copy.

NVRTC's optimizer (NVVM) unrolls every loop printed with `#pragma unroll` in full, and most of a
kernel's compile time goes to the copies it makes. An access printed as `buf[index]` holds the
whole flat index as one 32-bit sum, so each copy carries its own sum of the loop-invariant part
(thread and block indices, outer loops) and its constant, and its own widening to an address,
which the optimizer then folds again copy by copy. Printed as `(buf + invariant)[offset]`, every
copy is the same pointer plus a constant: the optimizer has less to fold. The program is
unchanged; only its spelling is: `(buf + a)[b]` is `buf[a + b]`. The machine code often stays
the same, but not always (ptxas then allocates registers and schedules anew), so a kernel may
come out a little faster or slower; the split is kept to where the compile time it saves is
large.

The split is made only where it is safe and pays:

- the buffer is in shared memory, which the long unrolled loops of a tile's products read (the
  global accesses in unrolled loops are short copies; splitting them saves no compile time);
- the access sits in at least `MIN_COPIES` unrolled copies (the product of the extents of the
  unrolled loops around it): in a small nest the time saved is small, and a different register
  allocation can still cost a small kernel its speed;
- each term of the index that names a variable of an enclosing unrolled loop is that variable
  or a constant multiple of it, so that the offset is a constant once the loops are unrolled (a
  term such as `(i * 4 + t) / 32` would leave a different pointer in every copy);
- every term is provably non-negative, so the pointer `buf + invariant` lies inside the buffer
  (C++ leaves pointer arithmetic outside an array undefined);
- both parts are non-empty (the constant of the sum goes to the offset).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autosched.te.expr import BinOp, Const, Expr, Select, Var
from autosched.te.visitor import free_vars

SPLIT_SCOPES = ("shared",)  # the scopes whose elements may split (module doc)
MIN_COPIES = 64  # the unrolled copies an access needs around it before it splits (module doc)


def is_nonneg(e: Expr) -> bool:
    """True when `e` is provably >= 0 in a lowered kernel: loop and thread variables (all start
    at 0), non-negative literals, and +, *, floordiv, floormod, min, max, select of such."""
    if isinstance(e, (Const, Var)):
        return isinstance(e, Var) or e.value >= 0
    if isinstance(e, BinOp) and e.op in ("+", "*", "floordiv", "floormod", "min", "max"):
        both = is_nonneg(e.a), is_nonneg(e.b)
        return any(both) if e.op == "max" else all(both)
    return isinstance(e, Select) and is_nonneg(e.t) and is_nonneg(e.f)


def split_unrolled(
    index: Expr, scope: str, unrolled: Mapping[int, int]
) -> tuple[Expr, Expr] | None:
    """(invariant, offset) whose sum is `index`, an element of a buffer in `scope` inside the
    unrolled loops `unrolled` (their variables' ids -> extents), the offset naming only their
    variables, linearly; None where the element does not split so (module doc)."""
    if scope not in SPLIT_SCOPES or math.prod(unrolled.values()) < MIN_COPIES:
        return None
    varying: list[Expr] = []
    invariant: list[Expr] = []
    constants: list[Expr] = []
    for term in _sum_terms(index):
        if isinstance(term, Const):
            constants.append(term)
        elif any(id(v) in unrolled for v in free_vars(term)):
            varying.append(term)
        else:
            invariant.append(term)
    if not varying or not invariant or not all(_linear_in(t, unrolled) for t in varying):
        return None
    if not all(map(is_nonneg, varying + invariant + constants)):
        return None
    return _sum(invariant), _sum(varying + constants)


def _sum_terms(e: Expr) -> list[Expr]:
    """The terms of a (nested) sum, left to right."""
    if isinstance(e, BinOp) and e.op == "+":
        return _sum_terms(e.a) + _sum_terms(e.b)
    return [e]


def _sum(terms: list[Expr]) -> Expr:
    out = terms[0]
    for term in terms[1:]:
        out = BinOp("+", out, term, out.dtype)
    return out


def _linear_in(e: Expr, ids: Mapping[int, int]) -> bool:
    """`e` is one of the variables in `ids`, or a constant multiple of one."""
    if isinstance(e, Var):
        return id(e) in ids
    if isinstance(e, BinOp) and e.op == "*":
        var, factor = (e.a, e.b) if isinstance(e.b, Const) else (e.b, e.a)
        return isinstance(factor, Const) and isinstance(var, Var) and id(var) in ids
    return False


__all__ = ["MIN_COPIES", "SPLIT_SCOPES", "is_nonneg", "split_unrolled"]
