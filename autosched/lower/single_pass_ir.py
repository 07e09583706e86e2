"""Single-pass cross-block reductions in the lowered IR: the blocks of one kernel each write
their partial results, and the last block to arrive sums them all and finishes the reduction
(the "last block" protocol of CUDA's threadFenceReduction sample), so no second kernel is
launched.

- `ThreadFence`: `__threadfence()`: the thread's global writes before it are visible to every
  block before its writes (or atomics) after it.
- `CountArrival`: a block-collective statement: a barrier, then thread 0 of the block adds 1
  to the int32 `counter[index]` (an atomic add), fences again and stores the count it found
  in the shared int32 `flag[0]`; a barrier. Every thread of the block then reads the flag.
  The block that finds `arrivals - 1` is the last: every other block fenced its partials
  before it arrived, so the last block may read them (`last_block`).

The last block's branch is an ordinary `IfThenElse` on the flag (`last_block`), the same in
every thread of a block, so barriers and block reductions may run inside it. The counter is a
workspace of the program (`ir.Program.workspaces`): zeroed when it is allocated, and reset to
0 by the last block, so the next launch (a CUDA graph's replay) starts from zero.

The verifier (`verify_single_pass.py`) checks the protocol's shape; the CPU interpreter
(`interpret_single_pass.py`) runs the arrivals in a chosen order of blocks and checks that a
block reads another block's writes only after its own arrival found every block arrived and
the writer fenced them before arriving. `codegen/single_pass.py` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.lower import ir
from autosched.te.expr import BinOp, Const, Expr, Load

COUNTER_DTYPE = "int32"


@dataclass(eq=False)
class ThreadFence(ir.Stmt):
    """`__threadfence()`: a thread's global writes before it are seen before those after it."""

    def text(self) -> str:
        return "threadfence"


@dataclass(eq=False)
class CountArrival(ir.Stmt):
    """The block arrives at `counter[index]` (see the module's description): `flag[0]` := the
    count before its atomic add, in every thread of the block; `arrivals` blocks arrive."""

    counter: ir.Buffer
    index: Expr
    flag: ir.Buffer
    arrivals: int

    def exprs(self) -> list[Expr]:
        return [self.index]

    def with_exprs(self, new: list[Expr]) -> CountArrival:
        return CountArrival(self.counter, new[0], self.flag, self.arrivals)

    def text(self) -> str:
        return (
            f"{self.flag.name}[0] = atomic_add({self.counter.name}[{self.index!r}], 1) "
            f"of {self.arrivals} arrivals"
        )


SINGLE_PASS_STMTS = (ThreadFence, CountArrival)


def last_block(arrival: CountArrival, body: ir.Stmt) -> ir.IfThenElse:
    """`body` run by the last block to arrive: the branch on the flag `arrival` set."""
    found = Load(arrival.flag, (ir.int32(0),))
    cond = BinOp("==", found, ir.int32(arrival.arrivals - 1), "bool")
    return ir.IfThenElse(cond, body)


def is_last_block(s: ir.Stmt, arrival: CountArrival) -> bool:
    """Whether `s` is `arrival`'s branch of the last block (as `last_block` makes it)."""
    if not isinstance(s, ir.IfThenElse):
        return False
    c = s.cond
    return (
        isinstance(c, BinOp)
        and c.op == "=="
        and isinstance(c.a, Load)
        and c.a.buffer is arrival.flag
        and isinstance(c.b, Const)
        and c.b.value == arrival.arrivals - 1
    )


def arrivals_of(kernel: ir.Kernel) -> list[CountArrival]:
    """The kernel's `CountArrival` statements, in program order."""
    return [s for s in ir.iter_stmts(kernel.body) if isinstance(s, CountArrival)]


__all__ = [
    "COUNTER_DTYPE",
    "SINGLE_PASS_STMTS",
    "CountArrival",
    "ThreadFence",
    "arrivals_of",
    "is_last_block",
    "last_block",
]
