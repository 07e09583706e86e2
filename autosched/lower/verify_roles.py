"""The verifier's rules of warp-specialised kernels (`lower/warp_roles_ir.py`), checked within
`verify._KernelVerifier`, which asks `RoleRules.split` first about every `if`:

- a role split is reached by the whole block, its producer is the one warpgroup after the
  consumer warps (`threadIdx.y >= W`, W a multiple of 4, blockDim (32, W + 4, 1)), each branch
  begins with its `WarpRole` (a register count a multiple of 8 in `REGISTER_RANGE`) and none
  holds another `WarpRole`;
- the producer's branch issues TMA copies and waits on mbarriers, nothing else (no store, no
  wgmma); the consumers' branch issues no copy and initialises no mbarrier;
- inside a role nothing needs the whole block: no `__syncthreads()`, cp.async group or
  all-reduce (`whole_block`); a `NamedBarrier` only in the consumers' branch, under no further
  thread-dependent condition, for exactly the consumer threads; an `MbarrierArrive` only
  there, on an mbarrier array initialised to one arrival a consumer warpgroup.
"""

from __future__ import annotations

from typing import Any

from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower import warp_roles_ir as wr
from autosched.lower.dispatch import TypeTable

_PRODUCER_STMTS = (ir.Seq, ir.For, ir.IfThenElse, wr.WarpRole, *ti.TMA_STMTS)
_ISSUED = (ti.MbarrierExpectTx, ti.TmaLoad, ti.MbarrierInit)


class RoleRules:
    """Checks one kernel's role split and role statements for a `_KernelVerifier` (`kv`)."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv
        self.role: str | None = None  # the role whose branch is being walked
        self.consumer_threads = 0
        self.arrivals = {
            id(s.bars): s.count for s in ir.iter_stmts(kv.k.body) if isinstance(s, ti.MbarrierInit)
        }

    def register(self, table: TypeTable[ir.Stmt, [str | None], None]) -> None:
        table.register(wr.WarpRole, self.warp_role)
        table.register(wr.NamedBarrier, self.named_barrier)
        table.register(wr.MbarrierArrive, self.arrive)

    def whole_block(self, divergent: str | None) -> str | None:
        """The condition that keeps part of the block from a statement: `divergent`, or the
        role split being walked."""
        return divergent if self.role is None else divergent or f"the {self.role} warp role"

    def split(self, s: ir.IfThenElse, divergent: str | None) -> bool:
        """Walk `s` if it is a role split (returns whether it was)."""
        found = wr.role_split(s)
        if found is None:
            return False
        kv = self.kv
        producer, consumer, threads = found
        warps = threads // ir.WARP_SIZE
        if divergent is not None or self.role is not None:
            kv.fail(f"a warp role split under {self.whole_block(divergent)}")
        if warps % 4 or tuple(kv.k.block) != (ir.WARP_SIZE, warps + 4, 1):
            kv.fail(
                f"a role split at warp {warps} of a block {kv.k.block}: the producer must be "
                "the one warpgroup after whole consumer warpgroups, blockDim (32, W + 4, 1)"
            )
        for x in ir.iter_stmts(producer):
            if not isinstance(x, _PRODUCER_STMTS):
                kv.fail(f"the producer warp role runs a {type(x).__name__}; TMA issues only")
        for branch in (producer, consumer):
            roles = [x for x in ir.iter_stmts(branch) if isinstance(x, wr.WarpRole)]
            if len(roles) != 1:
                kv.fail("each branch of a role split holds exactly one WarpRole, its first")
        self.consumer_threads = threads
        for role, branch in zip(wr.ROLES, (producer, consumer), strict=True):
            self.role = role
            kv.stmt(branch, None)
        self.role = None
        return True

    def issued(self, s: ir.Stmt) -> None:
        """A TMA statement the elected issuer runs: outside the consumers' branch."""
        if self.role == "consumer" and isinstance(s, _ISSUED):
            self.kv.fail(f"{type(s).__name__} in the consumer warp role; the producer issues")
        if self.role == "producer" and isinstance(s, ti.MbarrierInit):
            self.kv.fail("MbarrierInit in the producer warp role; before the split")

    def warp_role(self, s: wr.WarpRole, divergent: str | None) -> None:
        lo, hi = wr.REGISTER_RANGE
        if self.role != s.role:
            self.kv.fail(f"WarpRole({s.role!r}) outside the first statement of its branch")
        if not isinstance(s.regs, int) or s.regs % 8 or not lo <= s.regs <= hi:
            self.kv.fail(f"WarpRole({s.role!r}, {s.regs!r}): registers {lo}..{hi}, by 8")

    def named_barrier(self, s: wr.NamedBarrier, divergent: str | None) -> None:
        if self.role != "consumer" or divergent is not None:
            where = divergent or "outside the consumer warp role"
            self.kv.fail(f"bar.sync {wr.NAMED_BARRIER_ID} under {where}")
        if s.threads != self.consumer_threads:
            self.kv.fail(
                f"bar.sync {wr.NAMED_BARRIER_ID}, {s.threads} in a block of "
                f"{self.consumer_threads} consumer threads"
            )

    def arrive(self, s: wr.MbarrierArrive, divergent: str | None) -> None:
        kv = self.kv
        if self.role != "consumer" or divergent is not None:
            kv.fail(f"MbarrierArrive on {s.bars.name} outside the consumer warp role")
        kv.buffer(s.bars, "MbarrierArrive")
        kv.expr(s.slot, "MbarrierArrive", "int")
        groups = self.consumer_threads // wr.WARPGROUP_THREADS
        if self.arrivals.get(id(s.bars)) != groups:
            kv.fail(
                f"MbarrierArrive on {s.bars.name}, initialised to "
                f"{self.arrivals.get(id(s.bars))} arrivals; {groups} consumer warpgroups arrive"
            )


__all__ = ["RoleRules"]
