"""Row statistics held in registers: the device pass `hoist_row_scalars`.

A normalisation's output reads its row's statistics element by element: softmax
`exp(x - max) / sum`, layer norm `(x - mean) * rsqrt(var + eps)`, RMSNorm
`x * rsqrt(ms + eps)`, the statistics one shared-memory value each (the block's reduction result,
or the cluster's fold). Printed as they are, every element reads them from shared memory again
and recomputes what follows from them alone (the rsqrt, the variance from the moments), unless
the compiler proves the reads unchanged between the elements. This pass computes each such
loop-invariant expression once per thread, into a register before the element loop, and the loop
reads the register; a division by one (float32) becomes a multiply by its reciprocal computed
there once, as a hand-written kernel and torch.compile's do (at most one more rounding than the
division: well inside any task's tolerance).

It rewrites kernels that have a cross-thread reduction (`ir.AllReduce`), where such statistics
come from, and in them the outermost loops made of plain statements (stores, loops, conditions:
no barrier, no cross-thread or asynchronous statement). Out of such a loop it takes each
expression that reads a shared buffer, whose every load reads a shared or local buffer at a
constant slot that nothing in the loop writes, and that uses no variable of the loop or of a
loop inside it. With no barrier in the loop, the value read before the loop is the value each
element read: every write of another thread that an element could see was ordered before the
loop by a barrier outside it. The loads read in-bounds constant slots, so computing them where
a guard in the loop would have skipped them is harmless. A device pass: the analysis program
(and with it the cost model's features) is unchanged.
"""

from __future__ import annotations

import dataclasses

from autosched.lower import ir
from autosched.lower.ir import int32
from autosched.lower.stmt_walk import map_exprs
from autosched.te.expr import BinOp, Const, Expr, Load, Var
from autosched.te.visitor import rewrite, walk

# the dtype whose divisions by a loop-invariant value become a multiply by its reciprocal
RECIPROCAL_DTYPE = "float32"


def _loop_facts(loop: ir.For) -> tuple[set[int], set[int]] | None:
    """(ids of the loop variables bound in `loop`, ids of the buffers written in it), or None
    when it holds anything but stores, loops, conditions and sequences."""
    bound: set[int] = set()
    written: set[int] = set()
    for s in ir.iter_stmts(loop):
        if isinstance(s, ir.For):
            bound.add(id(s.var))
        elif isinstance(s, ir.Store):
            written.add(id(s.buffer))
        elif not isinstance(s, (ir.Seq, ir.IfThenElse)):
            return None
    return bound, written


class _Hoister:
    """The invariant expressions of one loop, each given a register (`hoisted`)."""

    def __init__(self, bound: set[int], written: set[int], taken: set[str]) -> None:
        self.bound, self.written, self.taken = bound, written, taken
        self.hoisted: dict[tuple, tuple[ir.Buffer, Expr]] = {}

    def _readable(self, load: Load) -> bool:
        buf = load.buffer
        if not isinstance(buf, ir.Buffer) or buf.scope not in ("shared", "local"):
            return False
        if id(buf) in self.written or buf.async_copy or len(load.indices) != 1:
            return False
        (index,) = load.indices
        return isinstance(index, Const) and 0 <= int(index.value) < buf.size

    def invariant(self, e: Expr) -> bool:
        """Whether `e` reads a shared buffer and is the same in every iteration of the loop."""
        reads_shared = False
        for n in walk(e):
            if isinstance(n, Load):
                if not self._readable(n):
                    return False
                reads_shared |= n.buffer.scope == "shared"
            elif isinstance(n, Var) and id(n) in self.bound:
                return False
        return reads_shared

    def register(self, e: Expr, hint: str) -> Expr:
        """A load of the register that holds `e`, computed before the loop."""
        got = self.hoisted.get(e._key)
        if got is None:
            first = next(n.buffer for n in walk(e) if isinstance(n, Load))
            name = f"{first.name}_{hint}"
            k = 1
            while name in self.taken:
                name, k = f"{first.name}_{hint}_{k}", k + 1
            self.taken.add(name)
            got = (ir.Buffer(name, (1,), e.dtype, "local"), e)
            self.hoisted[e._key] = got
        return Load(got[0], (int32(0),))

    def replace(self, e: Expr) -> Expr | None:
        """The rewrite of node `e` (None: keep it, rewrite its children)."""
        if isinstance(e, Load) and not self._readable(e):
            return None
        if self.invariant(e):
            return self.register(e, "reg")
        if (
            isinstance(e, BinOp)
            and e.op == "/"
            and e.dtype == RECIPROCAL_DTYPE
            and self.invariant(e.b)
        ):
            one = Const(1.0, e.dtype)
            inverse = self.register(BinOp("/", one, e.b, e.dtype), "inv")
            return BinOp("*", rewrite(e.a, self.replace), inverse, e.dtype)
        return None


def _hoist(s: ir.Stmt, taken: set[str], allocs: list[ir.Buffer]) -> ir.Stmt:
    if isinstance(s, ir.Seq):
        return ir.Seq([_hoist(c, taken, allocs) for c in s.stmts])
    if isinstance(s, ir.IfThenElse):
        els = _hoist(s.else_case, taken, allocs) if s.else_case is not None else None
        return ir.IfThenElse(s.cond, _hoist(s.then_case, taken, allocs), els)
    if not isinstance(s, ir.For):
        return s
    facts = _loop_facts(s)
    if facts is None:
        return ir.For(s.var, s.extent, s.kind, _hoist(s.body, taken, allocs))
    hoister = _Hoister(*facts, taken)
    body = map_exprs(s.body, lambda e: rewrite(e, hoister.replace))
    loop = ir.For(s.var, s.extent, s.kind, body)
    if not hoister.hoisted:
        return loop
    stores: list[ir.Stmt] = []
    for buf, value in hoister.hoisted.values():
        allocs.append(buf)
        stores.append(ir.Store(buf, int32(0), value))
    return ir.Seq([*stores, loop])


def hoist_row_scalars(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with each loop's invariant statistics computed once into registers before it
    (the module's description), where it has a cross-thread reduction (whose results the
    statistics are); any other kernel as it is."""
    if not any(isinstance(s, ir.AllReduce) for s in ir.iter_stmts(kernel.body)):
        return kernel
    allocs = list(kernel.allocs)
    taken = {b.name for b in allocs}
    body = _hoist(kernel.body, taken, allocs)
    return dataclasses.replace(kernel, allocs=allocs, body=body)


__all__ = ["RECIPROCAL_DTYPE", "hoist_row_scalars"]
