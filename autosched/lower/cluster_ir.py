"""Thread-block clusters (Hopper, sm_90) in the lowered IR: blocks that run at the same time on
neighbouring SMs, read each other's shared memory (distributed shared memory) and wait for each
other at a cluster barrier.

A cluster kernel (`ir.Kernel.cluster` = C > 1, C in `CLUSTER_SIZES`) groups its blocks in
clusters of C consecutive blocks along x: the grid's x extent is a multiple of C, and the
block at blockIdx.x is block `blockIdx.x % C` of its cluster, its rank (`CLUSTER_RANK`, the
`%cluster_ctarank` register). The kernel declares the shape at compile time
(`__cluster_dims__(C, 1, 1)`), so it launches as any other kernel, except that a cluster of more
than `PORTABLE_CLUSTER_SIZE` blocks (16, which Hopper runs but does not promise to every part)
launches only once the function is allowed non-portable cluster sizes
(`measure.cluster_size`, called by every launcher).

- `ClusterLoad`: `dst[dst_index] := src[src_index]` of the block of rank `rank` in the reading
  block's cluster, `src` a shared buffer (`mapa.shared::cluster` maps the address,
  `ld.shared::cluster` reads it).
- `ClusterBarrier`: `barrier.cluster.arrive.release` then `barrier.cluster.wait.acquire`:
  every thread of every block of the cluster waits there; the writes of shared memory before
  it are visible to the cluster's reads after it. It also orders the block's own threads as
  `__syncthreads()` does.

The rules (`verify_cluster.py` checks them in program order, the CPU interpreter
`interpret_cluster.py` exactly): a block reads another block's shared element only after a
cluster barrier that follows the element's last write; a block overwrites an element that
another block read only after a cluster barrier that follows the read; and a cluster barrier
follows the last remote read, since a block's shared memory ends with the block. The CUDA
printer prints them in `codegen/cluster.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.lower import ir
from autosched.te.expr import Expr, Var
from measure.cluster_size import PORTABLE_CLUSTER_BLOCKS

# The cluster sizes a kernel may declare: 8 blocks is the portable most; 16 needs the launch's
# opt-in, which every launcher makes above the bound `measure.cluster_size` keeps.
CLUSTER_SIZES = (2, 4, 8, 16)
PORTABLE_CLUSTER_SIZE = PORTABLE_CLUSTER_BLOCKS
# A block's rank in its cluster (0 .. C - 1), bound in every cluster kernel.
CLUSTER_RANK = Var("cluster_rank", ir.I32)


@dataclass(eq=False)
class ClusterBarrier(ir.Stmt):
    """Every thread of every block of the cluster waits here (release / acquire)."""


@dataclass(eq=False)
class ClusterLoad(ir.Stmt):
    """`dst[dst_index] := src[src_index]` of the cluster's block `rank` (distributed shared
    memory): `src` is shared, `dst` local or shared, both of one dtype."""

    dst: ir.Buffer
    dst_index: Expr
    src: ir.Buffer
    src_index: Expr
    rank: Expr

    def exprs(self) -> list[Expr]:
        return [self.dst_index, self.src_index, self.rank]

    def with_exprs(self, new: list[Expr]) -> ClusterLoad:
        return ClusterLoad(self.dst, new[0], self.src, new[1], new[2])


CLUSTER_STMTS = (ClusterBarrier, ClusterLoad)


def uses_cluster(kernel: ir.Kernel) -> bool:
    """Whether `kernel` is launched in clusters or has cluster statements."""
    return kernel.cluster > 1 or any(
        isinstance(s, CLUSTER_STMTS) for s in ir.iter_stmts(kernel.body)
    )


def remote_sources(kernel: ir.Kernel) -> list[ir.Buffer]:
    """The shared buffers `kernel`'s cluster loads read, each once."""
    found = {id(s.src): s.src for s in ir.iter_stmts(kernel.body) if isinstance(s, ClusterLoad)}
    return list(found.values())


__all__ = [
    "CLUSTER_RANK",
    "PORTABLE_CLUSTER_SIZE",
    "CLUSTER_SIZES",
    "CLUSTER_STMTS",
    "ClusterBarrier",
    "ClusterLoad",
    "remote_sources",
    "uses_cluster",
]
