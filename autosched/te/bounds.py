"""Proving that a compute's reads stay inside the tensors they read.

Interval arithmetic over the compute's iteration domain (spatial axes [0, extent), reduce axes
[lo, lo + extent)) bounds every index expression of every Load of a te.Tensor. A read is rejected
only when the bound is *attained*: the evaluator tracks whether an interval's ends are values the
index really takes, and it gives up (accepts the read) on anything it cannot follow: an operator
it does not model, a variable used twice in non-linear positions, a guard it cannot read.

Guards refine the domain. Inside `if_then_else(cond, t, f)` the `t` side assumes `cond` and the `f`
side its negation; a Reduce's `where` guards its source. A guard's conjuncts of the form
`linear cmp linear` on a single axis narrow that axis's range exactly (topi's padding:
`i2 >= 1 && i2 < 8` around `data[..., i2 - 1, ...]`). Conjuncts on several axes are kept as facts
on their linear form, and any conjunct the evaluator cannot use makes its axes "opaque": a read
whose index mentions an opaque axis is never rejected, so a guard can only prevent an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from autosched.errors import TEError
from autosched.te.dtype import is_int
from autosched.te.expr import BinOp, Cast, Const, Expr, IterVar, Load, Not, Reduce, Select, Var
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import children, free_vars

# ---- linear forms: sum(coef * var) + const -------------------------------------------------


@dataclass(frozen=True)
class Linear:
    """`sum(coef * var) + const`; `coeffs` holds (id(var), coef) pairs, sorted, no zeros."""

    coeffs: tuple[tuple[int, int], ...]
    const: int

    def plus(self, other: Linear, sign: int = 1) -> Linear:
        merged = dict(self.coeffs)
        for v, c in other.coeffs:
            merged[v] = merged.get(v, 0) + sign * c
        return Linear(_normal(merged), self.const + sign * other.const)

    def scaled(self, k: int) -> Linear:
        return Linear(_normal({v: c * k for v, c in self.coeffs}), self.const * k)


def _normal(coeffs: dict[int, int]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((v, c) for v, c in coeffs.items() if c))


def linear(e: Expr) -> Linear | None:
    """The linear form of an integer expression, or None when it is not affine in its vars."""
    if not is_int(e.dtype):
        return None
    if isinstance(e, Const):
        return Linear((), int(e.value))
    if isinstance(e, Var):
        return Linear(((id(e), 1),), 0)
    if isinstance(e, Cast):
        return linear(e.value)
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        a, b = linear(e.a), linear(e.b)
        if a is None or b is None:
            return None
        if e.op != "*":
            return a.plus(b, 1 if e.op == "+" else -1)
        if not a.coeffs:
            return b.scaled(a.const)
        if not b.coeffs:
            return a.scaled(b.const)
    return None


# ---- the domain: axis ranges refined by guards ----------------------------------------------


@dataclass(frozen=True)
class Span:
    """An inclusive integer interval; `exact` when both ends are values really taken."""

    lo: int
    hi: int
    exact: bool
    vars: frozenset[int]


@dataclass(frozen=True)
class Domain:
    """Where a sub-expression is evaluated: each axis's range, facts on multi-axis linear forms,
    the axes a guard constrains in a way not modelled (opaque), and whether it is reachable."""

    ranges: dict[int, tuple[int, int]]
    facts: dict[tuple, tuple[int, int]] = field(default_factory=dict)
    opaque: frozenset[int] = frozenset()
    reachable: bool = True

    @staticmethod
    def of_axes(axes: tuple[IterVar, ...]) -> Domain:
        return Domain({id(a): (a.lo, a.lo + a.extent - 1) for a in axes})

    def assume(self, cond: Expr, truth: bool = True) -> Domain:
        """This domain where `cond` evaluates to `truth`."""
        dom = _Refiner(self)
        dom.add(cond, truth)
        return dom.result()

    def span_of(self, form: Linear) -> tuple[int, int]:
        lo = hi = form.const
        for v, c in form.coeffs:
            a, b = self.ranges[v]
            lo += min(c * a, c * b)
            hi += max(c * a, c * b)
        return lo, hi


_FLIP = {">=": "<", "<": ">=", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}


class _Refiner:
    """Adds a guard's conjuncts to a copy of a Domain."""

    def __init__(self, dom: Domain) -> None:
        self.ranges = dict(dom.ranges)
        self.facts = dict(dom.facts)
        self.opaque = set(dom.opaque)
        self.reachable = dom.reachable

    def result(self) -> Domain:
        dom = Domain(self.ranges, self.facts, frozenset(self.opaque), self.reachable)
        return dom if not dom.reachable or self._satisfiable(dom) else replace(dom, reachable=False)

    @staticmethod
    def _satisfiable(dom: Domain) -> bool:
        """False when an axis's range is empty or a fact excludes the whole box (a sound test:
        True does not promise a point satisfying every fact at once)."""
        if any(lo > hi for lo, hi in dom.ranges.values()):
            return False
        for key, (lo, hi) in dom.facts.items():
            box_lo, box_hi = dom.span_of(Linear(key, 0))
            lo = box_lo if lo is None else max(lo, box_lo)
            hi = box_hi if hi is None else min(hi, box_hi)
            if lo > hi:
                return False
        return True

    def add(self, cond: Expr, truth: bool) -> None:
        if isinstance(cond, Not):
            self.add(cond.a, not truth)
        elif isinstance(cond, Const):
            self.reachable &= bool(cond.value) == truth
        elif isinstance(cond, BinOp) and cond.op in ("&&", "||"):
            if (cond.op == "&&") == truth:  # a conjunction: both sides hold (or both fail)
                self.add(cond.a, truth)
                self.add(cond.b, truth)
            else:
                self._give_up(cond)
        elif isinstance(cond, BinOp) and cond.op in _FLIP and is_int(cond.a.dtype):
            self._compare(cond, cond.op if truth else _FLIP[cond.op])
        else:
            self._give_up(cond)

    def _give_up(self, cond: Expr) -> None:
        self.opaque.update(id(v) for v in free_vars(cond))

    def _compare(self, cond: BinOp, op: str) -> None:
        a, b = linear(cond.a), linear(cond.b)
        if a is None or b is None or op == "!=":
            self._give_up(cond)
            return
        form = a.plus(b, -1)  # form.coeffs . vars + form.const  (op)  0
        lo, hi = {
            ">=": (-form.const, None),
            ">": (1 - form.const, None),
            "<=": (None, -form.const),
            "<": (None, -form.const - 1),
            "==": (-form.const, -form.const),
        }[op]
        if not form.coeffs:
            self.reachable &= (lo is None or lo <= 0) and (hi is None or 0 <= hi)
        elif len(form.coeffs) == 1:
            ((v, c),) = form.coeffs
            if v not in self.ranges:
                self._give_up(cond)
                return
            if c < 0:
                c, lo, hi = -c, None if hi is None else -hi, None if lo is None else -lo
            old_lo, old_hi = self.ranges[v]
            new_lo = old_lo if lo is None else max(old_lo, -(-lo // c))
            new_hi = old_hi if hi is None else min(old_hi, hi // c)
            self.ranges[v] = (new_lo, new_hi)
        elif any(v not in self.ranges for v, _ in form.coeffs):
            self._give_up(cond)
        else:
            # A constraint coupling several axes: the domain is no longer a box in them.
            self.opaque.update(v for v, _ in form.coeffs)
            key = form.coeffs
            if key[0][1] < 0:
                key = Linear(key, 0).scaled(-1).coeffs
                lo, hi = None if hi is None else -hi, None if lo is None else -lo
            old_lo, old_hi = self.facts.get(key, (None, None))
            self.facts[key] = (_tighter(max, old_lo, lo), _tighter(min, old_hi, hi))


def _tighter(pick: Callable[[int, int], int], old: int | None, new: int | None) -> int | None:
    if old is None:
        return new
    return old if new is None else pick(old, new)


# ---- interval evaluation --------------------------------------------------------------------


def span(e: Expr, dom: Domain) -> Span | None:
    """The range of integer expression `e` over `dom`, or None when it cannot be bounded."""
    if not is_int(e.dtype):
        return None
    form = linear(e)
    if form is not None:
        if any(v not in dom.ranges for v, _ in form.coeffs):
            return None
        lo, hi = dom.span_of(form)
        ids = frozenset(v for v, _ in form.coeffs)
        lo, hi = _with_facts(form, dom, lo, hi)
        return Span(lo, hi, not (ids & dom.opaque), ids)
    rule = SPAN_RULES.get(type(e))
    return rule(e, dom) if rule is not None else None


def _with_facts(form: Linear, dom: Domain, lo: int, hi: int) -> tuple[int, int]:
    if len(form.coeffs) < 2:
        return lo, hi
    for sign in (1, -1):
        fact = dom.facts.get(form.scaled(sign).coeffs)
        if fact is not None:
            f_lo, f_hi = fact if sign == 1 else (_neg(fact[1]), _neg(fact[0]))
            lo = lo if f_lo is None else max(lo, f_lo + form.const)
            hi = hi if f_hi is None else min(hi, f_hi + form.const)
    return lo, hi


def _neg(x: int | None) -> int | None:
    return None if x is None else -x


def _binop_span(e: BinOp, dom: Domain) -> Span | None:
    rule = BINOP_RULES.get(e.op)
    a, b = span(e.a, dom), span(e.b, dom)
    if rule is None or a is None or b is None:
        return None
    got = rule(a, b)
    if got is None:
        return None
    lo, hi, exact = got
    exact = exact and a.exact and b.exact and not (a.vars & b.vars)
    return Span(lo, hi, exact, a.vars | b.vars)


def _corners(f: Callable[[int, int], int], a: Span, b: Span) -> tuple[int, int, bool]:
    vals = [f(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return min(vals), max(vals), True


def _floordiv(a: Span, b: Span) -> tuple[int, int, bool] | None:
    if b.lo <= 0 <= b.hi:
        return None
    return _corners(lambda x, y: x // y, a, b)  # monotone in each argument off y = 0


def _floormod(a: Span, b: Span) -> tuple[int, int, bool] | None:
    if b.lo <= 0:
        return None
    if b.lo == b.hi and a.lo // b.lo == a.hi // b.lo:  # one period: monotone
        return a.lo % b.lo, a.hi % b.lo, True
    return 0, b.hi - 1, False


BINOP_RULES: dict[str, Callable[[Span, Span], tuple[int, int, bool] | None]] = {
    "+": lambda a, b: (a.lo + b.lo, a.hi + b.hi, True),
    "-": lambda a, b: (a.lo - b.hi, a.hi - b.lo, True),
    "*": lambda a, b: _corners(lambda x, y: x * y, a, b),
    "floordiv": _floordiv,
    "floormod": _floormod,
    "min": lambda a, b: (min(a.lo, b.lo), min(a.hi, b.hi), True),
    "max": lambda a, b: (max(a.lo, b.lo), max(a.hi, b.hi), True),
}


def _select_span(e: Select, dom: Domain) -> Span | None:
    sides = [(e.t, dom.assume(e.cond, True)), (e.f, dom.assume(e.cond, False))]
    spans: list[Span] = []
    for x, d in sides:
        if d.reachable:
            got = span(x, d)
            if got is None:
                return None
            spans.append(got)
    if not spans:
        return None
    ids = frozenset().union(*(s.vars for s in spans), (id(v) for v in free_vars(e.cond)))
    return Span(min(s.lo for s in spans), max(s.hi for s in spans), False, ids)


def _cast_span(e: Cast, dom: Domain) -> Span | None:
    return span(e.value, dom) if is_int(e.value.dtype) else None


# node type -> the span of a node of that type that is not linear (each rule takes that type)
SPAN_RULES: dict[type[Expr], Callable[[Any, Domain], Span | None]] = {
    BinOp: _binop_span,
    Select: _select_span,
    Cast: _cast_span,
}


# ---- the check -----------------------------------------------------------------------------


def check_reads(op: ComputeOp) -> None:
    """Raise TEError when compute `op` provably reads a tensor out of its bounds."""
    body: Expr = op.body
    dom = Domain.of_axes(tuple(op.axis) + tuple(op.reduce_axis))
    stack: list[tuple[Expr, Domain]] = [(body, dom)]
    seen: set[tuple[int, int]] = set()
    alive: list[Domain] = []  # keeps every domain's id unique while `seen` holds it
    while stack:
        node, here = stack.pop()
        if (id(node), id(here)) in seen or not here.reachable:
            continue
        seen.add((id(node), id(here)))
        alive.append(here)
        if isinstance(node, Load) and isinstance(node.buffer, Tensor):
            _check_load(op, node, here)
        if isinstance(node, Select):
            stack += [(node.cond, here), (node.f, here.assume(node.cond, False))]
            stack.append((node.t, here.assume(node.cond, True)))
        elif isinstance(node, Reduce) and node.condition is not None:
            stack += [(node.condition, here), (node.source, here.assume(node.condition))]
        else:
            stack += [(k, here) for k in children(node)]


def _check_load(op: ComputeOp, load: Load, dom: Domain) -> None:
    tensor = load.buffer
    for axis, (index, extent) in enumerate(zip(load.indices, tensor.shape, strict=True)):
        got = span(index, dom)
        if got is None or not got.exact or (0 <= got.lo and got.hi < extent):
            continue
        raise TEError(
            f"compute {op.name!r} reads {load!r} with index range [{got.lo}, {got.hi}] on axis "
            f"{axis} of extent {extent} (tensor {tensor.name!r} has shape {list(tensor.shape)}); "
            "shrink the compute's range or guard the read with te.if_then_else"
        )


__all__ = ["Domain", "Linear", "Span", "check_reads", "linear", "span"]
