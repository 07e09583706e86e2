"""The CPU interpreter's thread-block clusters (`cluster_ir.py`): cluster loads, cluster
barriers and the checks that make a missing cluster barrier an error.

The interpreter runs every block of a kernel in lock-step, so the blocks of a cluster run
together and a `ClusterLoad` reads the other block's shared memory as it is at that statement.
On a GPU the blocks run at their own pace, so what that read sees is defined only when a cluster
barrier orders it after the write; per element of each shared buffer that a cluster load reads,
the lanes (global thread ids) that wrote it and that read it through the cluster since the last
`ClusterBarrier` are tracked (as min and max lane):

- a cluster load of an element another lane wrote since the last cluster barrier is a race;
- overwriting (with a different value) an element another lane read through the cluster since
  the last cluster barrier is a race;
- a kernel that ends while an element was read by a block other than its owner since the last
  cluster barrier is an error (the owner may exit, and its shared memory with it, first).

A cluster barrier that only some threads of a cluster reach is a divergent barrier. The rank
register (`cluster_ir.CLUSTER_RANK`) is `blockIdx.x % C`: the cluster's C blocks are the
consecutive blocks of linear ids `C * c .. C * c + C - 1` (x varies fastest, and the grid's x
extent is a multiple of C).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched.lower import cluster_ir as ci
from autosched.lower import ir
from autosched.lower.dispatch import TypeTable


class _ClusterTracker:
    """Per element (block * size + index): the lanes that wrote / read it through the cluster
    since the last cluster barrier, as min and max lane (none: min large, max -1)."""

    NONE_MIN = np.iinfo(np.int64).max

    def __init__(self, n: int) -> None:
        self.wmin, self.wmax = np.empty(n, np.int64), np.empty(n, np.int64)
        self.rmin, self.rmax = np.empty(n, np.int64), np.empty(n, np.int64)
        self.clear()

    def clear(self) -> None:
        for lo, hi in ((self.wmin, self.wmax), (self.rmin, self.rmax)):
            lo.fill(self.NONE_MIN)
            hi.fill(-1)

    @staticmethod
    def others(lo: np.ndarray, hi: np.ndarray, lane: np.ndarray) -> np.ndarray:
        """Elements touched by some lane other than `lane`."""
        return (hi >= 0) & ~((lo == lane) & (hi == lane))


class ClusterRun:
    """The cluster state of one kernel run (`interpreter._KernelRun`, as `run`)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        k = run.k
        self.C = k.cluster
        if self.C < 1 or k.grid[0] % self.C:
            run.fail(
                f"kernel {k.name}: grid {tuple(k.grid)} is not a whole number of clusters of "
                f"{self.C} blocks along x"
            )
        self.rank = run.ix["blockIdx.x"] % self.C
        run.env[id(ci.CLUSTER_RANK)] = self.rank
        self.trackers = {id(b): _ClusterTracker(run.nblocks * b.size) for b in ci.remote_sources(k)}

    def load(self, s: ci.ClusterLoad, mask: Any) -> None:
        run = self.run
        if s.src.scope != "shared":
            run.fail(f"ClusterLoad from {s.src.scope} buffer {s.src.name}: only shared memory")
        lanes = run.lanes_of(mask)
        rank = np.broadcast_to(np.asarray(run.eval(s.rank, mask)), (run.L,))[lanes]
        bad = (rank < 0) | (rank >= self.C)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            run.fail(
                f"ClusterLoad from {s.src.name}: rank {int(rank[j])} by {run.where(int(lanes[j]))} "
                f"is outside its cluster of {self.C} blocks in kernel {run.k.name}"
            )
        src, arr = run.bufs_of(s.src)
        idx = np.broadcast_to(np.asarray(run.eval(s.src_index, mask)), (run.L,))[lanes]
        run._check_bounds(src, idx, lanes, "cluster read")
        block = run.ix["block"][lanes]
        target = block - self.rank[lanes] + rank
        keys = target * src.size + idx
        tr = self.trackers[id(src)]
        racy = tr.others(tr.wmin[keys], tr.wmax[keys], lanes)
        if racy.any():
            j = int(np.flatnonzero(racy)[0])
            run.fail(
                f"race on shared buffer {src.name}: {run.where(int(lanes[j]))} reads element "
                f"[{int(idx[j])}] of cluster block {int(rank[j])}, which "
                f"{run.where(int(tr.wmin[keys[j]]))} wrote since the last cluster barrier "
                f"(missing barrier.cluster?) in kernel {run.k.name}"
            )
        np.minimum.at(tr.rmin, keys, lanes)
        np.maximum.at(tr.rmax, keys, lanes)
        values = np.empty(run.L, arr.dtype)
        values[lanes] = arr.reshape(-1)[keys]
        run._write(s.dst, run.eval(s.dst_index, mask), values, mask, shared_owner=False)

    def shared_write(
        self, buf: ir.Buffer, arr: np.ndarray, keys: np.ndarray, val: np.ndarray, lanes: Any
    ) -> None:
        """Check and record a store into shared memory (`keys`: block * size + index) before
        it lands: overwriting what another lane read through the cluster is a race."""
        tr = self.trackers.get(id(buf))
        if tr is None:
            return
        changed = arr.reshape(-1)[keys] != val
        keys, lanes = keys[changed], np.asarray(lanes)[changed]
        racy = tr.others(tr.rmin[keys], tr.rmax[keys], lanes)
        if racy.any():
            j = int(np.flatnonzero(racy)[0])
            run = self.run
            run.fail(
                f"race on shared buffer {buf.name}: {run.where(int(lanes[j]))} overwrites "
                f"element [{int(keys[j]) % buf.size}] that {run.where(int(tr.rmin[keys[j]]))} "
                f"read through its cluster since the last cluster barrier (missing "
                f"barrier.cluster?) in kernel {run.k.name}"
            )
        np.minimum.at(tr.wmin, keys, lanes)
        np.maximum.at(tr.wmax, keys, lanes)

    def barrier(self, s: ci.ClusterBarrier, mask: Any) -> None:
        run = self.run
        if mask is not None:
            per_cluster = self.C * run.T
            count = mask.reshape(run.nblocks // self.C, per_cluster).sum(axis=1)
            partial = np.flatnonzero((count > 0) & (count < per_cluster))
            if partial.size:
                lane = int(partial[0]) * per_cluster
                run.fail(
                    f"barrier.cluster reached by only {int(count[partial[0]])} of {per_cluster} "
                    f"threads of the cluster of {run.where(lane)} in kernel {run.k.name} "
                    "(divergent barrier)"
                )
        for block_tracker in run.trackers.values():
            block_tracker.clear()
        for tr in self.trackers.values():
            tr.clear()

    def finish(self) -> None:
        """At the kernel's end: no block may still be reading another block's shared memory."""
        run = self.run
        for b in ci.remote_sources(run.k):
            tr = self.trackers[id(b)]
            keys = np.flatnonzero(tr.rmax >= 0)
            owner = keys // b.size
            foreign = (tr.rmin[keys] // run.T != owner) | (tr.rmax[keys] // run.T != owner)
            if foreign.any():
                j = int(np.flatnonzero(foreign)[0])
                reader = tr.rmin[keys[j]] if tr.rmin[keys[j]] // run.T != owner[j] else None
                reader = tr.rmax[keys[j]] if reader is None else reader
                run.fail(
                    f"kernel {run.k.name} ends while {run.where(int(reader))} read shared "
                    f"buffer {b.name} of another block of its cluster since the last cluster "
                    "barrier: a barrier.cluster must follow the last remote read (the owner may "
                    "exit first)"
                )


def register_cluster_handlers(table: TypeTable[ir.Stmt, [Any], None], run: Any) -> ClusterRun:
    """Register the cluster statements' handlers, bound to the kernel run `run`, in its
    statement table; returns their state (the run reports shared stores to it)."""
    state = ClusterRun(run)
    table.register(ci.ClusterLoad, state.load)
    table.register(ci.ClusterBarrier, state.barrier)
    return state


__all__ = ["ClusterRun", "register_cluster_handlers"]
