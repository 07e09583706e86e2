"""CUDA for the warp roles of a warp-specialised pipeline (`lower/warp_roles_ir.py`).

- A role split prints as the `if` it is, the producer's branch then run by its elected thread
  only (thread 0 of the producer warpgroup issues every copy; its other threads have nothing
  to do until the barrier after the split), so the TMA statements inside print unguarded:

      if (threadIdx.y >= W) {
        setmaxnreg.dec.sync.aligned.u32 40;
        if (threadIdx.x == 0 && threadIdx.y == W) { the producer's loop }
      } else {
        setmaxnreg.inc.sync.aligned.u32 R;
        the consumers' statements
      }

- `WarpRole`: `setmaxnreg.{dec,inc}.sync.aligned.u32 regs` (every thread of the warpgroup).
- `MbarrierArrive`: `mbarrier.arrive.shared::cta.b64` by the first thread of each warpgroup.
- `NamedBarrier`: `bar.sync 1, threads`.
"""

from __future__ import annotations

from collections.abc import Callable

from autosched.codegen.context import PrintContext, StmtTable
from autosched.codegen.tma import TmaPrinter
from autosched.lower import ir, stmt_walk
from autosched.lower import warp_roles_ir as wr

_ARRIVE = (
    "if (threadIdx.x == 0 && threadIdx.y % 4 == 0) asm volatile("
    '"mbarrier.arrive.shared::cta.b64 _, [%0];\\n" :: "r"({bar}) : "memory");'
)


class RolePrinter:
    """Prints one kernel's role statements; the kernel printer asks it first for each `if`."""

    def __init__(
        self, printer: PrintContext, tma: TmaPrinter, stmt: Callable[[ir.Stmt, int], None]
    ) -> None:
        self.p, self.tma, self.stmt = printer, tma, stmt

    def register(self, table: StmtTable) -> None:
        table.register(wr.WarpRole, self.role)
        table.register(wr.MbarrierArrive, self.arrive)
        table.register(wr.NamedBarrier, self.named_barrier)

    def split(self, s: ir.IfThenElse, d: int) -> bool:
        """Print `s` if it is a role split (returns whether it was)."""
        found = wr.role_split(s)
        if found is None:
            return False
        producer, consumer, consumer_threads = found
        p = self.p
        warps = consumer_threads // ir.WARP_SIZE
        p.emit(d, f"if ({p.ex(s.cond)}) {{")
        steps = stmt_walk.statements(producer)
        self.stmt(steps[0], d + 1)
        p.emit(d + 1, f"if (threadIdx.x == 0 && threadIdx.y == {warps}) {{  // the issuer")
        self.tma.issuer = True
        for step in steps[1:]:
            self.stmt(step, d + 2)
        self.tma.issuer = False
        p.emit(d + 1, "}")
        p.emit(d, "} else {")
        self.stmt(consumer, d + 1)
        p.emit(d, "}")
        return True

    def role(self, s: wr.WarpRole, d: int) -> None:
        verb = "dec" if s.role == "producer" else "inc"
        self.p.emit(
            d, f'asm volatile("setmaxnreg.{verb}.sync.aligned.u32 {s.regs};\\n" ::: "memory");'
        )

    def arrive(self, s: wr.MbarrierArrive, d: int) -> None:
        self.p.emit(d, _ARRIVE.format(bar=self.tma.bar(s.bars, s.slot)))

    def named_barrier(self, s: wr.NamedBarrier, d: int) -> None:
        self.p.emit(
            d, f'asm volatile("bar.sync {wr.NAMED_BARRIER_ID}, {s.threads};\\n" ::: "memory");'
        )


__all__ = ["RolePrinter"]
