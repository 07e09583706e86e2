"""A kernel whose rows are split over thread-block clusters (`sketch/row_cluster.py`): its
launch and the statements that make its blocks a cluster.

A stage of the kernel binds an iterator to `CLUSTER_RANK_TAG` (extent C): lowering gives that
iterator the cluster rank (`cluster_ir.CLUSTER_RANK`) and no loop. The kernel then launches C
blocks where it launched one along x: block `blockIdx.x` is block `blockIdx.x % C` of cluster
`blockIdx.x / C`, which takes the place of the old block index in every expression; and a last
cluster barrier keeps each block's shared memory alive until the other blocks of its cluster
have read it (`cluster_ir`).
"""

from __future__ import annotations

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.cluster_ir import CLUSTER_SIZES, ClusterBarrier
from autosched.lower.cross_thread import cross_thread_tag
from autosched.lower.plan import LoweringPlan
from autosched.lower.stmt_walk import map_exprs
from autosched.schedule.stage import CLUSTER_RANK_TAG, REDUCE
from autosched.te.expr import BinOp
from autosched.te.visitor import substitute


def cluster_size(plan: LoweringPlan, root: int) -> int:
    """The extent of the iterators root stage `root`'s kernel binds to the cluster rank (all
    of one extent, in `CLUSTER_SIZES`); 1 when none is. Only the root's iterators and the
    reduction iterators of cross-thread reductions may be bound to it: the root's blocks then
    share its elements, a reduction's blocks exchange their parts (`cross_thread`); any other
    stage would compute only its block's part of what its readers need."""
    sizes = set()
    for j in plan.subtree(root):
        st = plan.stages[j]
        for it in st.iters:
            if it.annotation != CLUSTER_RANK_TAG:
                continue
            reduces = it.kind == REDUCE
            if (reduces and cross_thread_tag(plan, j) is None) or (not reduces and j != root):
                raise LoweringError(
                    f"stage {st.name!r} binds {it.name} to the cluster rank, which only the "
                    "kernel's root stage and the reduction iterators of cross-thread reductions "
                    "may"
                )
            sizes.add(plan.info[j].ext[it.name])
    if not sizes:
        return 1
    if len(sizes) > 1 or not sizes <= set(CLUSTER_SIZES):
        raise LoweringError(
            f"stage {plan.stages[root].name!r}: its kernel binds the cluster rank with extents "
            f"{sorted(sizes)}; one of {CLUSTER_SIZES} expected"
        )
    return sizes.pop()


def clustered(
    body: ir.Stmt, grid: tuple[int, int, int], cluster: int
) -> tuple[ir.Stmt, tuple[int, int, int]]:
    """`body` and `grid` of a kernel launched in clusters of `cluster` blocks along x (the
    module's description)."""
    bx = ir.THREAD_VARS["blockIdx.x"]
    cluster_index = BinOp("floordiv", bx, ir.int32(cluster), ir.I32)
    body = map_exprs(body, lambda e: substitute(e, {bx: cluster_index}))
    return ir.seq([body, ClusterBarrier()]), (grid[0] * cluster, grid[1], grid[2])


__all__ = ["cluster_size", "clustered"]
