"""The CPU interpreter's warp-specialised blocks (`lower/warp_roles_ir.py`): the producer and
consumer warpgroups of a role split run as two programs, interleaved.

On the GPU the roles run concurrently and meet only at mbarriers. Here each role is a Python
generator over its statements that stops before every `MbarrierWait` until the phase it waits
for has completed (`TmaRun.ready`); the scheduler runs the producer as far as it can, then one
statement of the consumers, and again, so the producer issues every copy as early as the
protocol lets it (the order that exposes a refill of a slot not yet released). Neither role able
to move is a deadlock, an error. Everything else is the lock-step interpreter's: the
statements run under the role's lanes, the TMA and wgmma checks apply as they are, and

- `MbarrierArrive`: one arrival a warpgroup on the slot's current phase (more arrivals than it
  expects are an error);
- a wait that returns on a phase that arrivals completed orders the arriving threads' earlier
  accesses before the waiter: shared memory's race records and the retired wgmma reads are
  cleared as by a barrier (the producer refills the slot after it);
- `NamedBarrier(threads)`: the first `threads` threads of each block, exactly, reach it; a
  barrier for them;
- `WarpRole`: its register count must be a multiple of 8 in `REGISTER_RANGE`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower import warp_roles_ir as wr
from autosched.lower.dispatch import TypeTable

_BLOCKED = "blocked"  # a role's next statement is a wait that cannot return yet
_MOVED = "moved"


class RoleRun:
    """The role splits of one kernel run (`interpreter._KernelRun`)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.waiting: dict[str, ti.MbarrierWait] = {}

    def fail(self, what: str) -> None:
        self.run.fail(f"kernel {self.run.k.name}: {what}")

    # ---- the split ------------------------------------------------------------------------
    def split(self, s: ir.IfThenElse, mask: Any) -> bool:
        """Run `s` as a role split if it is one (returns whether it was)."""
        found = wr.role_split(s)
        if found is None:
            return False
        producer, consumer, consumer_threads = found
        run = self.run
        if run.tma is None:
            self.fail("a warp role split without TMA statements")
        active = np.ones(run.L, bool) if mask is None else np.broadcast_to(mask, (run.L,))
        run._uniform(mask, "a warp role split")
        cond = np.broadcast_to(np.asarray(run.eval(s.cond, mask), dtype=bool), (run.L,))
        tid = run.ix["tid"]
        wrong = (cond != (tid >= consumer_threads)).any()
        if wrong or run.T - consumer_threads != wr.WARPGROUP_THREADS:
            self.fail(
                f"the producer of a role split must be the one warpgroup after the "
                f"{consumer_threads} consumer threads ({run.T} threads a block)"
            )
        roles = {
            "producer": (self.steps(producer, active & cond, "producer"), wr.WARPGROUP_THREADS),
            "consumer": (self.steps(consumer, active & ~cond, "consumer"), consumer_threads),
        }
        done: set[str] = set()
        while len(done) < len(roles):
            moved = False
            while "producer" not in done:  # the producer as far as it can
                got = self.advance(roles, "producer", done)
                if got != _MOVED:
                    break
                moved = True
            if "consumer" not in done and self.advance(roles, "consumer", done) != _BLOCKED:
                moved = True
            if not moved and len(done) < len(roles):
                waits = ", ".join(
                    f"the {role} on {w.bars.name}"
                    for role, w in self.waiting.items()
                    if role not in done
                )
                self.fail(f"deadlock between the warp roles: {waits} wait forever")
        return True

    def advance(self, roles, role: str, done: set[str]) -> str:
        """One step of `role`'s program under its lanes: _MOVED, _BLOCKED or "done"."""
        program, threads = roles[role]
        outer = self.run.role_threads
        self.run.role_threads = threads
        try:
            got = next(program, "done")
        finally:
            self.run.role_threads = outer
        if got == "done":
            done.add(role)
        return got

    def steps(self, s: ir.Stmt, mask: np.ndarray, role: str) -> Iterator[str]:
        """`s` one statement at a time; a wait yields _BLOCKED until it may return."""
        run = self.run
        if isinstance(s, ir.Seq):
            for c in s.stmts:
                yield from self.steps(c, mask, role)
            return
        if isinstance(s, ir.For) and _waits_in(s.body):
            for i in range(s.extent):
                run.env[id(s.var)] = i
                yield from self.steps(s.body, mask, role)
            run.env.pop(id(s.var), None)
            return
        if isinstance(s, ti.MbarrierWait):
            self.waiting[role] = s
            while not run.tma.ready(s, mask):
                yield _BLOCKED
        elif isinstance(s, ir.IfThenElse) and _waits_in(s):
            self.fail("a wait under a condition inside a warp role")
        run.stmt(s, mask)
        yield _MOVED

    # ---- statements -----------------------------------------------------------------------
    def role(self, s: wr.WarpRole, mask: Any) -> None:
        lo, hi = wr.REGISTER_RANGE
        if s.role not in wr.ROLES or s.regs % 8 or not lo <= s.regs <= hi:
            self.fail(f"WarpRole({s.role!r}, {s.regs}): a role of {wr.ROLES}, {lo}..{hi} by 8")

    def arrive(self, s: wr.MbarrierArrive, mask: Any) -> None:
        run, tma = self.run, self.run.tma
        blocks = tma.blocks(s, mask)
        slots = tma.per_block(s.slot, blocks, mask)
        st = tma.state(s, s.bars, slots, blocks)
        tma.arrived.add(id(s.bars))
        active = np.ones(run.L, bool) if mask is None else np.broadcast_to(mask, (run.L,))
        per_block = active.reshape(run.nblocks, run.T)
        for b, slot in zip(blocks, slots, strict=True):
            groups = np.flatnonzero(per_block[b].reshape(-1, wr.WARPGROUP_THREADS).any(axis=1))
            if st.pending[b, slot] < groups.size:
                self.fail(
                    f"{groups.size} warpgroups arrive on {s.bars.name}[{slot}], whose phase "
                    f"expects {int(st.pending[b, slot])} more arrivals"
                )
            st.pending[b, slot] -= groups.size
            st.complete(b, slot)

    def named_barrier(self, s: wr.NamedBarrier, mask: Any) -> None:
        run = self.run
        active = np.ones(run.L, bool) if mask is None else np.broadcast_to(mask, (run.L,))
        per_block = active.reshape(run.nblocks, run.T)
        reached = per_block.any(axis=1)
        first = np.arange(run.T) < s.threads
        if (per_block[reached] != first).any():
            self.fail(f"bar.sync 1, {s.threads} is reached by other than the first threads")
        run.release()


def _waits_in(s: ir.Stmt) -> bool:
    return any(isinstance(x, ti.MbarrierWait) for x in ir.iter_stmts(s))


def register_role_handlers(table: TypeTable[ir.Stmt, [Any], None], run: Any) -> RoleRun:
    """Register the role statements' handlers, bound to the kernel run `run`; the run asks
    the returned state to run each role split (`RoleRun.split`)."""
    state = RoleRun(run)
    table.register(wr.WarpRole, state.role)
    table.register(wr.MbarrierArrive, state.arrive)
    table.register(wr.NamedBarrier, state.named_barrier)
    return state


__all__ = ["RoleRun", "register_role_handlers"]
