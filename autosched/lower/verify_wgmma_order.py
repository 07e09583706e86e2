"""The verifier's rule for shared memory that wgmmas read asynchronously: no store may reach an
element a wgmma may still be reading (`check_async_reads`).

A wgmma reads its shared operands at any time until a `wgmma.wait_group` retires it (its commit
group and every older one, when at most `pending` newer groups remain). In a block of several
warpgroups a thread learns of another warpgroup's wait only through a barrier after it, so there
a retired wgmma's operands stay reserved until the next barrier. A store (a cp.async as soon as
it is issued) into such an element is an error: the Hopper mainloop (`wgmma_mainloop`) may
fetch into a pipeline slot only after the wait that frees it.

The check walks the kernel in program order with the wgmmas that may be reading (each operand
as the range of elements its descriptor reaches from its start, and how many groups were
committed after its own). A loop body is walked three times, the reads left in flight by one
step carried into the next with the loop variable one less (valid from the step where that is
not negative), so a fetch is checked against the two steps before it as well; reads that
outlive those are kept as reads of any earlier step, and reads left after a loop as reads of
any of its steps. A store and a read conflict when, for some value of the loops both depend
on, their element ranges (bounded over every other variable) meet, and enumerating the other
variables' values (the store's under its guards) confirms it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.arith import expr_bounds, simplify
from autosched.lower.warp_roles_ir import NamedBarrier
from autosched.te.expr import BinOp, Const, Expr, Not, Var
from autosched.te.expr_text import expr_str
from autosched.te.npeval import eval_expr
from autosched.te.visitor import free_vars, substitute

CARRIED_STEPS = 2  # earlier steps of a loop whose reads a step is checked against
MAX_POINTS = 4096  # loop-value combinations enumerated before bounding over all of them
EXACT_POINTS = 1 << 20  # thread and loop values enumerated to settle an overlap the bounds see
_BLOCK_VARS = {id(ir.THREAD_VARS[tag]) for tag in ir.BLOCK_TAGS}
# what changes the reads in flight: a loop without them ends each step as it began it
_ASYNC_ORDER = (wi.WgmmaMma, wi.WgmmaCommit, wi.WgmmaWait, ir.Barrier)


@dataclass(frozen=True)
class _Read:
    """Elements `first` .. `first + span - 1` of `buffer` that wgmma `stmt` may be reading,
    where every `(var, n)` of `after` has var >= n; `age` groups were committed after its own
    (None: its group is still open)."""

    stmt: wi.WgmmaMma
    buffer: ir.Buffer
    first: Expr
    span: int
    after: tuple[tuple[Var, int], ...] = ()
    age: int | None = None

    def key(self) -> tuple:
        after = tuple((id(v), n) for v, n in self.after)
        return (id(self.stmt), id(self.buffer), repr(self.first), self.span, after, self.age)


@dataclass(frozen=True)
class _State:
    """The reads in flight, and (in a block of several warpgroups) the retired reads no
    barrier has followed yet."""

    pending: tuple[_Read, ...] = ()
    retired: tuple[_Read, ...] = ()

    def merge(self, other: _State) -> _State:
        def union(a, b):
            return tuple({r.key(): r for r in (*a, *b)}.values())

        return _State(union(self.pending, other.pending), union(self.retired, other.retired))


def _span(op: wi.SharedOperand, rows: int) -> int:
    """Elements from a tile's start to the last one its descriptor reaches."""
    d = wl.decode(wl.encode(0, op.lbo, op.sbo, op.swizzle))
    row, k = np.meshgrid(np.arange(rows), np.arange(wl.K), indexing="ij")
    return int(wl.element_address(d, op.major, row, k).max()) // wl.ELEMENT_BYTES + 1


def _period(v: Var, exprs: list[Expr]) -> int | None:
    """A P with every expression of `exprs` the same at v + P as at v, or None: v must occur
    only in `floormod(a, m)`s whose `a` steps by a constant c with v (then P is a multiple of
    each m / gcd(c, m))."""
    periods: list[int] = []
    later = BinOp("+", v, ir.int32(1), ir.I32)

    def periodic(e: Expr) -> bool:
        if e is v:
            return False  # v outside a floormod
        if (
            isinstance(e, BinOp)
            and e.op == "floormod"
            and isinstance(e.b, Const)
            and any(w is v for w in free_vars(e.a))
        ):
            step = simplify(BinOp("-", substitute(e.a, {v: later}), e.a, ir.I32))
            if not isinstance(step, Const):
                return False
            m = int(e.b.value)
            periods.append(m // math.gcd(int(step.value), m))
            return True
        return all(periodic(c) for c in e.children())

    if not all(periodic(e) for e in exprs) or not periods:
        return None
    return math.lcm(*periods)


class _NeedsMemory(Exception):
    """An index or guard that reads memory: its values are not enumerated."""


def _no_loads(node, indices, mask):
    raise _NeedsMemory(node)


def _over_every_step(r: _Read, v: Var, step: Var) -> _Read:
    """Read `r` of a step where `v` >= n (its condition), as a read of step `step` + n: over
    `step`'s range, every step it may have been (and more), none before the loop."""
    n = next((n for w, n in r.after if w is v), 0)
    shifted = BinOp("+", step, ir.int32(n), ir.I32) if n else step
    return replace(
        r,
        first=simplify(substitute(r.first, {v: shifted})),
        after=tuple((w, m) for w, m in r.after if w is not v),
    )


class _OrderCheck:
    """One kernel's walk (`check_async_reads`)."""

    def __init__(self, kernel: ir.Kernel) -> None:
        self.k = kernel
        launch = zip(ir.LAUNCH_TAGS, (*kernel.grid, *kernel.block), strict=True)
        self.ranges: dict[int, tuple[int, int]] = {
            id(ir.THREAD_VARS[tag]): (0, n - 1) for tag, n in launch
        }
        self.loops: dict[int, tuple[Var, int]] = {}
        self.several = kernel.block[1] > wl.WARPGROUP_WARPS
        self.guards: list[Expr] = []  # the conditions around the statement walked

    def fail(self, what: str) -> None:
        raise LoweringError(f"kernel {self.k.name}: {what}")

    def walk(self, s: ir.Stmt, st: _State) -> _State:
        if isinstance(s, ir.Seq):
            for c in s.stmts:
                st = self.walk(c, st)
            return st
        if isinstance(s, ir.For):
            return self.loop(s, st)
        if isinstance(s, ir.IfThenElse):
            then = self.guarded(s.cond, s.then_case, st)
            if s.else_case is None:
                return then.merge(st)
            return then.merge(self.guarded(Not(s.cond), s.else_case, st))
        if isinstance(s, wi.WgmmaMma):
            reads = (
                _Read(s, op.buffer, op.offset, _span(op, rows))
                for op, rows in ((s.a, wl.M), (s.b, s.n))
            )
            return replace(st, pending=(*st.pending, *reads))
        if isinstance(s, wi.WgmmaCommit):
            aged = tuple(replace(r, age=0 if r.age is None else r.age + 1) for r in st.pending)
            return replace(st, pending=aged)
        if isinstance(s, wi.WgmmaWait):
            done = [r for r in st.pending if r.age is not None and r.age >= s.pending]
            left = tuple(r for r in st.pending if all(r is not d for d in done))
            retired = (*st.retired, *done) if self.several else st.retired
            return _State(left, retired)
        if isinstance(s, (ir.Barrier, NamedBarrier)):
            return replace(st, retired=())
        if isinstance(s, ir.Store) and s.buffer.scope == "shared":
            self.store(s.buffer, s.index, 1, st)
        elif isinstance(s, wi.WgmmaStore) and s.dst.buffer.scope == "shared":
            rows, n = wl.M, s.acc.shape[-1]
            self.store(s.dst.buffer, s.dst.offset, (rows - 1) * s.dst.ldm + n, st)
        return st

    def guarded(self, cond: Expr, s: ir.Stmt, st: _State) -> _State:
        self.guards.append(cond)
        try:
            return self.walk(s, st)
        finally:
            self.guards.pop()

    def loop(self, s: ir.For, st: _State) -> _State:
        self.ranges[id(s.var)] = (0, s.extent - 1)
        self.loops[id(s.var)] = (s.var, s.extent)
        end = self.walk(s.body, st)
        steps = s.extent > 1 and any(isinstance(x, _ASYNC_ORDER) for x in ir.iter_stmts(s.body))
        for _ in range(CARRIED_STEPS if steps else 0):
            end = self.walk(s.body, st.merge(self.carried(end, s.var)))
        stale = self.older_steps(end, s.var, s.extent)
        if stale is not None:  # reads outlive the steps carried: any earlier step's may be
            end = self.walk(s.body, st.merge(self.carried(end, s.var)).merge(stale))
        del self.loops[id(s.var)]  # its range stays: reads after the loop span every step
        return self.after_loop(end, s.var, s.extent)

    def older_steps(self, st: _State, v: Var, extent: int) -> _State | None:
        """The reads of `st` carried from the oldest step walked, as reads of any earlier step
        (v replaced by a variable over every step, not enumerated); None if there are none."""

        def oldest(r: _Read) -> bool:
            return any(w is v and n >= CARRIED_STEPS for w, n in r.after)

        if not any(oldest(r) for r in (*st.pending, *st.retired)):
            return None
        any_step = Var(f"{v.name}_earlier", v.dtype)
        self.ranges[id(any_step)] = (0, extent - 1)

        def widen(reads: tuple[_Read, ...]) -> tuple[_Read, ...]:
            return tuple(_over_every_step(r, v, any_step) for r in reads if oldest(r))

        return _State(widen(st.pending), widen(st.retired))

    @staticmethod
    def carried(st: _State, v: Var) -> _State:
        """`st` at the end of step v, seen from step v + 1: the reads' v is one less, and they
        exist only from step 1 (2, ...) on."""
        earlier = BinOp("-", v, ir.int32(1), ir.I32)

        def shift(r: _Read) -> _Read:
            after = dict((id(w), (w, n)) for w, n in r.after)
            n = after.get(id(v), (v, 0))[1] + 1
            after[id(v)] = (v, n)
            first = simplify(substitute(r.first, {v: earlier}))
            return replace(r, first=first, after=tuple(after.values()))

        return _State(tuple(map(shift, st.pending)), tuple(map(shift, st.retired)))

    @staticmethod
    def after_loop(st: _State, v: Var, extent: int) -> _State:
        """`st` after the loop: its reads of any step (v keeps its range over every step)."""

        def settle(reads: tuple[_Read, ...]) -> tuple[_Read, ...]:
            out = []
            for r in reads:
                if any(w is v and extent - 1 < n for w, n in r.after):
                    continue  # a step that never ran
                out.append(_over_every_step(r, v, v))
            return tuple(out)

        return _State(settle(st.pending), settle(st.retired))

    def store(self, buf: ir.Buffer, index: Expr, width: int, st: _State) -> None:
        for r in st.pending:
            if r.buffer is buf and self.meet(index, width, r):
                self.fail(
                    f"a store into {buf.name}[{expr_str(index)}] may reach what the "
                    f"wgmma reading {buf.name}[{expr_str(r.first)}] still reads (in flight: "
                    "no wgmma.wait_group retired it)"
                )
        for r in st.retired:
            if r.buffer is buf and self.meet(index, width, r):
                self.fail(
                    f"a store into {buf.name}[{expr_str(index)}] may reach what the "
                    f"wgmma reading {buf.name}[{expr_str(r.first)}] of another warpgroup "
                    "still reads (retired by its wgmma.wait_group, but no barrier since)"
                )

    def meet(self, index: Expr, width: int, r: _Read) -> bool:
        """Whether the store's elements and the read's may overlap for some loop values. A
        loop variable that both reach only through `floormod` (a pipeline's slot) is
        enumerated over one period, from the first step the read exists in; the guards that
        use it are then left out (which only adds elements to the store)."""
        if not self.overlap(index, width, r, self.ranges):
            return False
        shared = {id(v) for v in free_vars(index)} & (
            {id(v) for v in free_vars(r.first)} | {id(w) for w, _ in r.after}
        )
        starts = {id(w): n for w, n in r.after}
        axes: list[tuple[Var, range]] = []
        periodic: set[int] = set()
        for i in shared:
            if i not in self.loops:
                continue
            v, extent = self.loops[i]
            first = starts.get(i, 0)
            period = _period(v, [index, r.first])
            if period is not None and first + period < extent:
                periodic.add(i)
                axes.append((v, range(first, first + period)))
            else:
                axes.append((v, range(first, extent)))
        if math.prod(len(a) for _, a in axes) > MAX_POINTS:
            axes = []
        for values in itertools.product(*(a for _, a in axes)):
            fixed = {id(v): x for (v, _), x in zip(axes, values, strict=True)}
            ranges = {**self.ranges, **{i: (x, x) for i, x in fixed.items()}}
            if self.overlap(index, width, r, ranges) and self.exact_overlap(
                index, width, r, fixed, periodic
            ):
                return True
        return False

    def domain(self, exprs: list[Expr], fixed: dict[int, int], after=()) -> dict[int, Any] | None:
        """Broadcast arrays of every value of the variables of `exprs` but the `fixed` ones
        (a loop variable v of an `after` condition from n on), each along its own axis; None
        where a variable has no known range (or is a block index) or the points are too many."""
        names = {id(v): v for e in exprs for v in free_vars(e) if id(v) not in fixed}
        if any(i not in self.ranges or i in _BLOCK_VARS for i in names):
            return None
        starts = {id(w): n for w, n in after}
        axes = {
            i: range(max(self.ranges[i][0], starts.get(i, 0)), self.ranges[i][1] + 1) for i in names
        }
        if math.prod(len(a) for a in axes.values()) > EXACT_POINTS:
            return None
        env: dict[int, Any] = dict(fixed)
        for axis, (i, values) in enumerate(axes.items()):
            shape = [1] * len(axes)
            shape[axis] = len(values)
            env[i] = np.arange(values.start, values.stop).reshape(shape)
        return env

    def exact_overlap(
        self, index: Expr, width: int, r: _Read, fixed: dict[int, int], periodic: set[int]
    ) -> bool:
        """Whether, with the loop variables `fixed`, an element the store writes (where its
        guards hold, over every thread and inner loop) lies in what the read reaches (over
        every warpgroup): the interval bounds lose the guards and the ties between a fused
        index's digits. Where the points cannot be enumerated, the answer is yes."""
        skip = _BLOCK_VARS | periodic
        guards = [g for g in self.guards if all(id(v) not in skip for v in free_vars(g))]
        env = self.domain([index, *guards], fixed)
        reads = self.domain([r.first], fixed, r.after)
        if env is None or reads is None:
            return True
        try:
            written = np.asarray(eval_expr(index, env, _no_loads))
            mask = np.ones((), bool)
            for g in guards:
                mask = mask & np.asarray(eval_expr(g, env, _no_loads)).astype(bool)
            starts = np.unique(np.asarray(eval_expr(r.first, reads, _no_loads)))
        except _NeedsMemory:
            return True
        shape = np.broadcast_shapes(written.shape, mask.shape)
        written = np.broadcast_to(written, shape)[np.broadcast_to(mask, shape)]
        if written.size == 0:
            return False
        last = written + width - 1  # the store's last element
        at = np.searchsorted(starts, last, side="right") - 1  # the latest read starting by it
        return bool(((at >= 0) & (written < starts[np.maximum(at, 0)] + r.span)).any())

    @staticmethod
    def overlap(index: Expr, width: int, r: _Read, ranges: dict[int, tuple[int, int]]) -> bool:
        lo, hi = expr_bounds(index, ranges)
        first, last = expr_bounds(r.first, ranges)
        return lo <= last + r.span - 1 and first <= hi + width - 1


def check_async_reads(kernel: ir.Kernel) -> None:
    """Raise LoweringError where a store into shared memory may reach what a wgmma still reads
    (see the module docstring); kernels without wgmmas pass at once."""
    if any(isinstance(s, wi.WgmmaMma) for s in ir.iter_stmts(kernel.body)):
        _OrderCheck(kernel).walk(kernel.body, _State())


__all__ = ["check_async_reads"]
