"""Warp-specialised TMA -> wgmma pipelines in the IR: a block split into one PRODUCER warpgroup
that issues the TMA copies and the CONSUMER warpgroups that wait for them and multiply
(CUTLASS sm90's `PipelineTmaAsync` protocol; `lower/warp_specialize.py` builds it).

The split is an `IfThenElse` on `threadIdx.y >= PRODUCER_FIRST_WARP` (the producer warpgroup
follows the consumers, so the consumers keep the thread indices the rest of the kernel was
lowered for) whose branches each begin with a `WarpRole` statement; `role_split` recognises it.
The two roles run concurrently on the GPU: the interpreter runs them as two interleaved
programs (`interpret_roles.py`), the verifier and the printer know the split by its roles.

- `WarpRole(role, regs)`: the branch's role and the registers a thread of it keeps
  (`setmaxnreg.dec` for the producer, `setmaxnreg.inc` for the consumers; a multiple of 8 in
  24..256, the same for the whole warpgroup);
- `MbarrierArrive(bars, slot)`: one arrival on `bars[slot]` by the first thread of each
  warpgroup that reaches it (the consumers' release of a slot; the arrival count of such a
  barrier is the number of consumer warpgroups);
- `NamedBarrier(threads)`: `bar.sync 1, threads`, a barrier of the consumer warpgroups only
  (the epilogue after the mainloop, which the producer skips).
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.te.expr import BinOp, Const, Expr

ROLES = ("producer", "consumer")
WARPGROUP_THREADS = 128
REGISTER_RANGE = (24, 256)  # setmaxnreg's legal counts, multiples of 8
PRODUCER_REGISTERS = 40  # what a producer thread keeps: it only computes coordinates
# the most a consumer thread asks for: CUTLASS's warp-specialised kernels' count, one block of
# 384 threads then holds the register file (128 x 40 + 256 x 232 of 65536)
CONSUMER_REGISTERS_MAX = 232
NAMED_BARRIER_ID = 1  # 0 is __syncthreads()


@dataclass(eq=False)
class WarpRole(ir.Stmt):
    """The first statement of a role's branch: `role` ("producer" or "consumer") and the
    registers each of its threads keeps (`setmaxnreg`)."""

    role: str
    regs: int

    def text(self) -> str:
        verb = "dec" if self.role == "producer" else "inc"
        return f"WarpRole({self.role}; setmaxnreg.{verb} {self.regs})"


@dataclass(eq=False)
class MbarrierArrive(ti.TmaStmt):
    """An arrival on `bars[slot]` by the first thread of each warpgroup reaching it."""

    EXPR_FIELDS = ("slot",)
    bars: ir.Buffer
    slot: Expr

    def text(self) -> str:
        return f"MbarrierArrive({self.bars.name}[{self.slot!r}]; one a warpgroup)"


@dataclass(eq=False)
class NamedBarrier(ir.Stmt):
    """`bar.sync 1, threads`: the first `threads` threads of the block (the consumers) wait."""

    threads: int

    def text(self) -> str:
        return f"bar.sync {NAMED_BARRIER_ID}, {self.threads}"


def producer_condition(consumer_warps: int) -> Expr:
    """`threadIdx.y >= consumer_warps`: the producer warpgroup's threads."""
    return BinOp(">=", ir.THREAD_VARS["threadIdx.y"], ir.int32(consumer_warps), "bool")


def role_split(s: ir.Stmt) -> tuple[ir.Stmt, ir.Stmt, int] | None:
    """(producer branch, consumer branch, consumer threads) of a role split, or None for any
    other statement."""
    if not isinstance(s, ir.IfThenElse) or s.else_case is None:
        return None
    cond = s.cond
    if not (
        isinstance(cond, BinOp)
        and cond.op == ">="
        and cond.a is ir.THREAD_VARS["threadIdx.y"]
        and isinstance(cond.b, Const)
    ):
        return None
    first = [_first(s.then_case), _first(s.else_case)]
    if not all(isinstance(f, WarpRole) for f in first):
        return None
    if [f.role for f in first if isinstance(f, WarpRole)] != list(ROLES):
        return None
    return s.then_case, s.else_case, int(cond.b.value) * ir.WARP_SIZE


def _first(s: ir.Stmt) -> ir.Stmt | None:
    if isinstance(s, ir.Seq):
        return s.stmts[0] if s.stmts else None
    return s


def role_of(branch: ir.Stmt) -> WarpRole:
    """The `WarpRole` a role branch begins with."""
    first = _first(branch)
    assert isinstance(first, WarpRole)
    return first


def uses_warp_roles(kernel: ir.Kernel) -> bool:
    """Whether `kernel` is split into producer and consumer warpgroups."""
    return any(role_split(s) is not None for s in ir.iter_stmts(kernel.body))


# threads a block may launch on every CUDA GPU: the producer warpgroup must fit beside the
# consumers
MAX_BLOCK_THREADS = 1024


def consumer_registers(consumer_threads: int, budget: int = 65536) -> int:
    """The registers a consumer thread may keep once the producer warpgroup keeps
    `PRODUCER_REGISTERS`: what is left of the block's `budget`, a multiple of 8 up to
    `CONSUMER_REGISTERS_MAX` (232 for one or two consumer warpgroups, 152 for three, 112 for
    four)."""
    left = (budget - PRODUCER_REGISTERS * WARPGROUP_THREADS) // consumer_threads
    return min(CONSUMER_REGISTERS_MAX, left // 8 * 8)


__all__ = [
    "CONSUMER_REGISTERS_MAX",
    "MAX_BLOCK_THREADS",
    "NAMED_BARRIER_ID",
    "PRODUCER_REGISTERS",
    "REGISTER_RANGE",
    "ROLES",
    "WARPGROUP_THREADS",
    "MbarrierArrive",
    "NamedBarrier",
    "WarpRole",
    "consumer_registers",
    "producer_condition",
    "role_of",
    "role_split",
    "uses_warp_roles",
]
