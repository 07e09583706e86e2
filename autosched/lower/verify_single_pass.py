"""The verifier's rules for single-pass kernels (`single_pass_ir.py`):

- a `CountArrival` is reached by every thread of the block (no thread-dependent guard: it
  holds barriers); its counter is an int32 workspace of the program (zeroed once), its flag
  an int32 shared allocation of the kernel, its `arrivals` the kernel's block count;
- at most one per kernel, a statement of the kernel's top-level sequence, right after a
  `ThreadFence` (every thread's partials fenced before the block arrives);
- after it, the branch of the last block (`single_pass_ir.last_block`), which stores 0 into
  the counter again, so that the next launch starts from zero.

The interpreter (`interpret_single_pass.py`) checks the rest as it runs: which reads of
other blocks' writes the arrivals allow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from autosched.lower import ir
from autosched.lower import single_pass_ir as sp
from autosched.lower.dispatch import TypeTable
from autosched.te.expr import Const


class SinglePassRules:
    """The single-pass statements' checks within a `verify._KernelVerifier` (as `kv`)."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv

    def register(self, table: TypeTable[ir.Stmt, [str | None], None]) -> None:
        table.register(sp.ThreadFence, self.fence)
        table.register(sp.CountArrival, self.arrive)

    def fence(self, s: sp.ThreadFence, divergent: str | None) -> None:
        """A fence is per thread: any thread may run it."""

    def arrive(self, s: sp.CountArrival, divergent: str | None) -> None:
        kv = self.kv
        if divergent is not None:
            kv.fail(f"CountArrival under the thread-dependent condition {divergent}")
        kv.buffer(s.counter, "CountArrival")
        kv.buffer(s.flag, "CountArrival")
        kv.expr(s.index, "CountArrival index", "int")
        blocks = kv.k.grid[0] * kv.k.grid[1] * kv.k.grid[2]
        if s.counter.scope != "global" or s.counter.dtype != sp.COUNTER_DTYPE:
            kv.fail(f"CountArrival counts in {s.counter.scope} {s.counter.dtype}: not global int32")
        if s.flag.scope != "shared" or s.flag.dtype != sp.COUNTER_DTYPE:
            kv.fail(f"CountArrival's flag is {s.flag.scope} {s.flag.dtype}: not shared int32")
        if s.arrivals != blocks:
            kv.fail(f"CountArrival expects {s.arrivals} blocks; the kernel launches {blocks}")


def check_single_pass(
    k: ir.Kernel, workspaces: list[ir.Buffer], fail: Callable[[str], NoReturn]
) -> None:
    """The protocol's shape in kernel `k` (the module's rules 2 and 3; the counter a workspace)."""
    arrivals = sp.arrivals_of(k)
    if not arrivals:
        return
    top = k.body.stmts if isinstance(k.body, ir.Seq) else [k.body]
    if len(arrivals) > 1:
        fail(f"{len(arrivals)} CountArrival statements: one per kernel")
    (arrival,) = arrivals
    if arrival not in top:
        fail("CountArrival inside a loop or branch: it must be a top-level statement")
    at = top.index(arrival)
    if at == 0 or not isinstance(top[at - 1], sp.ThreadFence):
        fail("CountArrival without a ThreadFence right before it (partials not fenced)")
    if all(b is not arrival.counter for b in workspaces):
        fail(f"the arrival counter {arrival.counter.name} is not a workspace of the program")
    last = [
        s for s in top[at + 1 :] if isinstance(s, ir.IfThenElse) and sp.is_last_block(s, arrival)
    ]
    if not any(resets(s.then_case, arrival) for s in last):
        fail(f"no last-block branch resets the counter {arrival.counter.name} to 0")


def resets(s: ir.Stmt, arrival: sp.CountArrival) -> bool:
    """Whether `s` stores 0 into `arrival`'s counter at its index."""
    return any(
        isinstance(x, ir.Store)
        and x.buffer is arrival.counter
        and x.index._key == arrival.index._key
        and isinstance(x.value, Const)
        and x.value.value == 0
        for x in ir.iter_stmts(s)
    )


__all__ = ["SinglePassRules", "check_single_pass"]
