"""The verifier's rules of thread-block clusters (`cluster_ir.py`).

- launch: a kernel's cluster size is 1 or one of `CLUSTER_SIZES`, and its grid's x extent a
  multiple of it;
- the cluster statements and the rank variable appear only in cluster kernels;
- a `ClusterBarrier` is reached by every thread of the cluster (no guard that depends on a
  thread or block index or on the rank);
- a `ClusterLoad` reads a shared buffer into a local or shared one of its dtype, its indices
  are ints, its rank provably within the cluster, and it is not in a vectorize loop;
- in program order, a cluster load of a shared buffer comes after a cluster barrier that follows
  the buffer's last write, a write of it after a cluster barrier that follows its last cluster
  load, and a cluster barrier follows the kernel's last cluster load (the interpreter checks
  the same per element and per execution, loops included).
"""

from __future__ import annotations

from typing import Any

from autosched.lower import cluster_ir as ci
from autosched.lower import ir
from autosched.lower.arith import expr_bounds
from autosched.lower.dispatch import TypeTable
from autosched.te.expr_text import expr_str
from autosched.te.visitor import free_vars


def check_cluster_launch(k: ir.Kernel, check: Any) -> None:
    """The cluster size of `k` and its grid's x extent (`check(cond, message)` raises)."""
    check(
        k.cluster == 1 or k.cluster in ci.CLUSTER_SIZES,
        f"kernel {k.name}: cluster of {k.cluster!r} blocks, not 1 or one of {ci.CLUSTER_SIZES}",
    )
    check(
        k.grid[0] % k.cluster == 0,
        f"kernel {k.name}: grid x extent {k.grid[0]} is not a multiple of its cluster of "
        f"{k.cluster} blocks",
    )


class ClusterRules:
    """The cluster statements' checks within a `verify._KernelVerifier` (as `kv`)."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv
        k = kv.k
        if k.cluster > 1:
            kv.bound.add(id(ci.CLUSTER_RANK))
            kv.ranges[id(ci.CLUSTER_RANK)] = (0, k.cluster - 1)

    def register(self, table: TypeTable[ir.Stmt, [str | None], None]) -> None:
        table.register(ci.ClusterBarrier, self.barrier)
        table.register(ci.ClusterLoad, self.load)

    def _in_cluster_kernel(self, what: str) -> None:
        if self.kv.k.cluster == 1:
            self.kv.fail(f"{what} in a kernel launched without clusters (cluster 1)")

    def barrier(self, s: ci.ClusterBarrier, divergent: str | None) -> None:
        self._in_cluster_kernel("barrier.cluster")
        if divergent is not None:
            self.kv.fail(
                f"barrier.cluster under the thread-dependent condition {divergent} "
                "(divergent barrier)"
            )

    def load(self, s: ci.ClusterLoad, divergent: str | None) -> None:
        kv = self.kv
        where = f"cluster load of {getattr(s.src, 'name', s.src)}"
        self._in_cluster_kernel(where)
        kv.buffer(s.src, where)
        kv.buffer(s.dst, where)
        if s.src.scope != "shared":
            kv.fail(f"{where}: reads a {s.src.scope} buffer; only shared memory is distributed")
        if s.dst.scope not in ("local", "shared"):
            kv.fail(f"{where}: writes {s.dst.scope} buffer {s.dst.name}, not local or shared")
        if s.src.dtype != s.dst.dtype:
            kv.fail(f"{where}: reads {s.src.dtype} into {s.dst.name} of {s.dst.dtype}")
        if kv.vector_loop is not None:
            kv.fail(f"{where}: inside the vectorize loop over {kv.vector_loop}")
        for e in s.exprs():
            kv.expr(e, where, "int")
        lo, hi = expr_bounds(s.rank, kv.ranges)
        if lo < 0 or hi >= kv.k.cluster:
            kv.fail(
                f"{where}: rank {expr_str(s.rank)} ranges over {lo}..{hi}, beyond the cluster's "
                f"{kv.k.cluster} blocks"
            )


def check_cluster_barriers(k: ir.Kernel, fail: Any) -> None:
    """No cluster barrier under a condition that may differ between the blocks of a cluster
    (one that uses a block index or the rank; the thread-dependent ones are `barrier`'s)."""
    per_block = {id(ir.THREAD_VARS[tag]) for tag in ir.BLOCK_TAGS} | {id(ci.CLUSTER_RANK)}

    def walk(s: ir.Stmt, guard: str | None) -> None:
        if isinstance(s, ci.ClusterBarrier) and guard is not None:
            fail(f"barrier.cluster under the block-dependent condition {guard}")
        elif isinstance(s, ir.Seq):
            for c in s.stmts:
                walk(c, guard)
        elif isinstance(s, ir.For):
            walk(s.body, guard)
        elif isinstance(s, ir.IfThenElse):
            varying = any(id(v) in per_block for v in free_vars(s.cond))
            inner = guard if guard is not None or not varying else expr_str(s.cond)
            walk(s.then_case, inner)
            if s.else_case is not None:
                walk(s.else_case, inner)

    walk(k.body, None)


def check_cluster_order(k: ir.Kernel, fail: Any) -> None:
    """In program order: a cluster load of a shared buffer only after a cluster barrier that
    follows the buffer's last write, a write of it only after one that follows its last cluster
    load, and a cluster barrier after the kernel's last cluster load."""
    written: dict[int, str] = {}  # shared buffers written since the last cluster barrier
    read: set[int] = set()  # shared buffers read by cluster loads since the last one
    unsynced_read: str | None = None  # a cluster load no cluster barrier has followed yet

    def write(buffer: ir.Buffer, what: str) -> None:
        if buffer.scope != "shared":
            return
        if id(buffer) in read:
            fail(
                f"{what} into {buffer.name} after another block's cluster load of it with no "
                "cluster barrier between (that block may not have read it yet)"
            )
        written[id(buffer)] = what

    for s in ir.iter_stmts(k.body):
        if isinstance(s, ci.ClusterBarrier):
            written.clear()
            read.clear()
            unsynced_read = None
        elif isinstance(s, ci.ClusterLoad):
            if id(s.src) in written:
                fail(
                    f"cluster load of {s.src.name} after its write by {written[id(s.src)]} with "
                    "no cluster barrier between (another block may not have written it yet)"
                )
            read.add(id(s.src))
            unsynced_read = s.src.name
            write(s.dst, "a cluster load")
        elif isinstance(s, ir.Store):
            write(s.buffer, "a store")
        elif isinstance(s, ir.AllReduce):
            write(s.buffer, "an allreduce")
    if unsynced_read is not None:
        fail(
            f"no cluster barrier follows the last cluster load (of {unsynced_read}): its owner "
            "block may exit, and its shared memory with it, before the read"
        )


__all__ = ["ClusterRules", "check_cluster_barriers", "check_cluster_launch", "check_cluster_order"]
