"""Folding the digits of one value back together in an integer index.

`fold_digits(e)` turns `(f // 9)*9 + f % 9` into `f` and `((f // 3) % 3)*3 + f % 3` into
`f % 9`: cache fetches decompose a fused index per axis and recombine it into a contiguous
buffer. The device pass `index_folding.fold_index_digits` applies it to every index of the
program that is printed and run, which saves the divisions (faster kernels, fewer spills,
quicker builds); the analysis program `lower` returns keeps the digits, from which the
features read per-dimension accesses.
"""

from __future__ import annotations

from autosched.lower.arith import Affine, Bounds, affine_div_or_mod, to_affine
from autosched.te.expr import BinOp, Const, Expr


def _digit(atom: Expr) -> tuple[Expr, int, int | None] | None:
    """`atom` as `(x // d) % m` -> (x, d, m); `x // d` -> (x, d, None); `x % m` -> (x, 1, m)."""
    if not (isinstance(atom, BinOp) and isinstance(atom.b, Const) and atom.b.value > 0):
        return None
    if atom.op == "floordiv":
        return atom.a, atom.b.value, None
    if atom.op != "floormod":
        return None
    x = atom.a
    if isinstance(x, BinOp) and x.op == "floordiv" and isinstance(x.b, Const) and x.b.value > 0:
        return x.a, x.b.value, atom.b.value
    return x, 1, atom.b.value


def _merge_digits(aff: Affine, bounds: Bounds, dtype: str) -> Affine:
    """Recombine the digits of one value: `c*((x // d) % m) + c*m*((y // (d*m)) % n)` is
    `c*((y // d) % (m*n))` (n absent: `c*(y // d)`) when y - x is a multiple of d*m (x and y
    are the same value, or differ by a multiple that an earlier simplification dropped, as in
    `(f // 7)*7 + tx % 7` with f = o*392 + tx). The fused-index decomposition
    `(f // 72)*72 + ((f // 9) % 8)*9 + ((f // 3) % 3)*3 + f % 3` of cache fetches becomes `f`.
    Floor semantics make every step exact for all integers."""
    digits = [
        [coef, *d, [key]] for key, (coef, a) in aff.terms.items() if (d := _digit(a)) is not None
    ]
    if len(digits) < 2:
        return aff

    def partner(lo):
        return next(
            (
                h
                for h in digits
                if lo[3] is not None
                and h[2] == lo[2] * lo[3]
                and h[0] == lo[0] * lo[3]
                and _congruent(h[1], lo[1], h[2], bounds)
            ),
            None,
        )

    joined = True
    while joined and len(digits) > 1:
        joined = False
        for lo in digits:
            hi = partner(lo)
            if hi is None and lo[2] > 1:
                # `(x // d) % m` is also the lowest digit of `x // d` (divisor 1): the form
                # a digit takes when a simplification dropped a multiple of d*m from x's
                # value, as in `((o*112 + t // 32) // 56)*56 + (t // 32) % 56`
                alt = [lo[0], BinOp("floordiv", lo[1], Const(lo[2], dtype), dtype), 1, *lo[3:]]
                hi = partner(alt)
                if hi is not None:
                    lo[1], lo[2] = alt[1], 1
            if hi is not None:
                digits.remove(hi)
                lo[1], lo[3], lo[4] = hi[1], None if hi[3] is None else lo[3] * hi[3], lo[4] + hi[4]
                joined = True
                break
    merged = [digit for digit in digits if len(digit[4]) > 1]
    if not merged:
        return aff
    gone = {key for digit in merged for key in digit[4]}
    out = Affine({k: v for k, v in aff.terms.items() if k not in gone}, aff.const)
    for coef, x, d, m, _ in merged:
        value = to_affine(x, bounds)
        if d > 1:
            value = affine_div_or_mod(value, d, "floordiv", bounds, dtype)
        if m is not None:
            value = affine_div_or_mod(value, m, "floormod", bounds, dtype)
        out = out.add(value.scale(coef))
    return out


def fold_digits(e: Expr, bounds: Bounds | None = None) -> Expr:
    """`e` with the digits of one value folded together (see `_merge_digits`; `bounds` let the
    result drop what the ranges make redundant); `e` itself when there is nothing to fold. Only
    the top-level sum is looked at: flat indices keep their digits there."""
    if e.dtype not in ("int32", "int64") or _top_level_divisions(e) < 2:
        return e
    bounds = {} if bounds is None else bounds  # an empty MemoBounds keeps its memo
    aff = to_affine(e, bounds)
    folded = _merge_digits(aff, bounds, e.dtype)
    return e if folded is aff else folded.to_expr(e.dtype)


def _top_level_divisions(e: Expr) -> int:
    """How many floordiv / floormod terms (times a constant or not) the sum `e` has."""
    count, todo = 0, [e]
    while todo:
        x = todo.pop()
        if isinstance(x, BinOp):
            if x.op in ("+", "-"):
                todo += (x.a, x.b)
            elif x.op == "*" and isinstance(x.b, Const):
                todo.append(x.a)
            elif x.op in ("floordiv", "floormod"):
                count += 1
    return count


def _congruent(x: Expr, y: Expr, modulus: int, bounds: Bounds) -> bool:
    """x - y is a multiple of `modulus` for all values of the variables."""
    if x._key == y._key:
        return True
    return to_affine(x, bounds).add(to_affine(y, bounds), -1).is_multiple_of(modulus)
