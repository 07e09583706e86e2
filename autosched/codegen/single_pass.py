"""CUDA for the single-pass statements (`lower/single_pass_ir.py`).

- `ThreadFence`: `__threadfence();`.
- `CountArrival`: a barrier (every thread's partials written and fenced), then thread 0 adds
  1 to the counter with `atomicAdd`, fences again (what the blocks that arrived before it
  wrote is then visible to this block's reads after the barrier) and stores the count it
  found in the shared flag; a barrier, after which every thread reads the flag.
"""

from __future__ import annotations

from autosched.codegen.context import PrintContext, StmtTable
from autosched.lower import ir
from autosched.lower import single_pass_ir as sp

FENCE = "__threadfence();"


class SinglePassPrinter:
    """Prints a kernel's arrival counting and fences, within a PrintContext."""

    def __init__(self, p: PrintContext) -> None:
        self.p = p

    def register(self, table: StmtTable) -> None:
        table.register(sp.ThreadFence, self.fence)
        table.register(sp.CountArrival, self.arrive)

    def fence(self, s: sp.ThreadFence, d: int) -> None:
        self.p.emit(d, FENCE)

    def arrive(self, s: sp.CountArrival, d: int) -> None:
        p, ex = self.p, self.p.ex
        first = " && ".join(f"{p.t.thread_index[t]} == 0" for t in ir.THREAD_TAGS)
        counter = f"&{ex.buffer_names[id(s.counter)]}[{ex(s.index)}]"
        flag = f"{ex.buffer_names[id(s.flag)]}[0]"
        p.emit(d, p.t.barrier)
        p.emit(d, f"if ({first}) {{")
        p.emit(d + 1, f"{flag} = atomicAdd({counter}, 1);")
        p.emit(d + 1, FENCE)
        p.emit(d, "}")
        p.emit(d, p.t.barrier)


__all__ = ["SinglePassPrinter"]
