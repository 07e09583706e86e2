"""Cross-thread reductions: a reduction iterator bound to a threadIdx tag.

Each thread reduces its share of the reduction into a per-thread accumulator tile (a local
buffer), then per element of the tile an `ir.AllReduce` over the tag combines the threads'
parts and one thread (or every thread, for a per-thread buffer) stores the result.

A reduction that also binds a reduction iterator to the cluster rank (`CLUSTER_RANK_TAG`,
sketch/row_cluster.py) has each block of a cluster reduce its part of the row that way; the
blocks' results are then exchanged through distributed shared memory (`cluster_exchange`), or,
for a softmax's sum of exponentials asking for it, together with its max's in one exchange
(online_exchange.py).

The functions take the `LoweringPlan` of the stage; `partial_of` and `cluster_exchange` record
the temporaries they make in `LoweringPlan.extra_allocs`.
"""

from __future__ import annotations

import math

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.cluster_ir import ClusterBarrier, ClusterLoad
from autosched.lower.guards import guards
from autosched.lower.intervals import depends_on
from autosched.lower.ir import I32, int32
from autosched.lower.online_exchange import (
    VARIANCE,
    block_mean_scale,
    chan_fold,
    online_fold,
    partner_read,
)
from autosched.lower.plan import LoweringPlan
from autosched.schedule.stage import CLUSTER_RANK_TAG, SPATIAL
from autosched.te.expr import BinOp, Const, Expr, Load, Reduce, Var
from autosched.te.reduce import BUILTIN_REDUCERS


def cross_thread_tag(plan: LoweringPlan, i: int) -> str | None:
    """The threadIdx tag stage i binds a reduction iterator to (a cross-thread reduction:
    each thread reduces its part, an AllReduce combines the parts), or None."""
    st, body = plan.stages[i], plan.info[i].body
    bound = [it for it in st.iters if it.kind != SPATIAL and it.annotation in ir.LAUNCH_TAGS]
    if not bound:
        return None
    tags = {it.annotation for it in bound}
    reducer = body.reducer if isinstance(body, Reduce) else None
    builtin = reducer is not None and BUILTIN_REDUCERS.get(reducer.name) is reducer
    refusals = (  # (refused?, why), first match wins
        (bool(tags.intersection(ir.BLOCK_TAGS)), "it binds a reduction iterator to a blockIdx"),
        (len(tags) > 1, "it binds reduction iterators to several thread axes"),
        (
            any(it.kind != "reduce" for it in bound),
            "an iterator bound to a thread fuses spatial and reduction iterators",
        ),
        (not builtin, "its reducer is not sum, max or min"),
    )
    why = next((why for refused, why in refusals if refused), None)
    if why is not None:
        raise LoweringError(f"stage {st.name!r} cannot be a cross-thread reduction: {why}")
    tag = tags.pop()
    tv = id(ir.THREAD_VARS[tag])
    for d, a in enumerate(plan.compute_op(i).axis):
        if depends_on(BinOp("+", plan.info[i].base[d], plan.info[i].value[a.name], I32), {tv}):
            raise LoweringError(
                f"stage {st.name!r} reduces across {tag} but its element {a.name} depends on "
                f"{tag} too (compute it at a loop outside the consumer's {tag})"
            )
    return tag


def inner_spatial(plan: LoweringPlan, i: int) -> list[str]:
    """Stage i's spatial loops inside its first reduction iterator (the accumulator tile)."""
    its = plan.stages[i].iters
    first = next(k for k, it in enumerate(its) if it.kind != SPATIAL)
    return [
        it.name for it in its[first:] if it.kind == SPATIAL and it.annotation not in ir.LAUNCH_TAGS
    ]


def partial_of(plan: LoweringPlan, i: int) -> tuple[ir.Buffer, Expr]:
    """Stage i's per-thread accumulator tile (a local buffer) and the index of the current
    element in it; made on first use, with a one-element buffer for the AllReduce result."""
    inf, name = plan.info[i], plan.stages[i].name
    names = inner_spatial(plan, i)
    if i not in plan.extra_allocs:
        size = math.prod(inf.ext[n] for n in names)
        plan.extra_allocs[i] = [
            ir.Buffer(plan.unique_name(f"{name}_part"), (size,), inf.buf.dtype, "local"),
            ir.Buffer(plan.unique_name(f"{name}_red"), (1,), inf.buf.dtype, "local"),
        ]
    idx: Expr = int32(0)
    for n in names:
        idx = BinOp("+", BinOp("*", idx, int32(inf.ext[n]), I32), plan.var_of(i, n), I32)
    return plan.extra_allocs[i][0], idx


def emit_cross_thread(
    plan: LoweringPlan, i: int, k: int, tag: str, reduce_nest: ir.Stmt
) -> ir.Stmt:
    """What replaces a reduction's init + loops at its first reduction iterator `k` when a
    reduction iterator is bound to `tag`: every thread sets its accumulator tile to the
    identity (out-of-range threads keep it: their part is neutral), runs the loops, then
    per element an AllReduce over `tag` combines the parts and the result is stored (by
    the thread whose `tag` index is 0 unless the buffer is per thread)."""
    st = plan.stages[i]
    part, pidx = partial_of(plan, i)
    red = plan.extra_allocs[i][1]
    body = plan.reduction(i)
    init: ir.Stmt = ir.Store(part, pidx, body.identity)
    value = Load(part, (pidx,))
    finish: list[ir.Stmt] = [
        ir.AllReduce(body.reducer.name, value, None, red, int32(0), tag, plan.block_extent[tag])
    ]
    store = result_store(plan, i, tag)
    tile = [it for it in st.iters[k:] if it.kind == SPATIAL]

    def over_tile(stmt: ir.Stmt) -> ir.Stmt:
        for it in reversed(tile):
            stmt = plan.loop(i, it.name, stmt)
        return stmt

    m = online_partner(plan, i)  # refuses a stage asking for it that cannot
    cluster = cluster_extent(plan, i)
    if cluster > 1:  # the tile's results published, one cluster barrier, then folded
        publish, fold = cluster_exchange(plan, i, pidx, cluster)
        partner = exchanging_partner(plan, i)
        if partner is not None:  # a sum's exchange folds it: the block's value meanwhile
            scale = block_scale(plan, i, partner, cluster)
            return ir.seq(
                [over_tile(init), reduce_nest, over_tile(ir.seq([*finish, publish, *scale, store]))]
            )
        if m is not None:  # one exchange of the pairs (online_exchange.py)
            partner_tag = cross_thread_tag(plan, m)
            assert partner_tag is not None  # online_partner checked it
            _, kind, _ = partner_read(plan, i)
            fold_pairs = chan_fold if kind == VARIANCE else online_fold
            return ir.seq(
                [
                    init,
                    reduce_nest,
                    *finish,
                    publish,
                    ClusterBarrier(),
                    *fold_pairs(plan, m, i, cluster),
                    result_store(plan, m, partner_tag),
                    store,
                ]
            )
        return ir.seq(
            [
                over_tile(init),
                reduce_nest,
                over_tile(ir.seq([*finish, publish])),
                ClusterBarrier(),
                over_tile(ir.seq([*fold, store])),
            ]
        )
    return ir.seq([over_tile(init), reduce_nest, over_tile(ir.seq([*finish, store]))])


def result_store(plan: LoweringPlan, i: int, tag: str) -> ir.Stmt:
    """Stage i's result (its AllReduce's, in its one-element `_red` buffer) stored into its
    buffer at its current element: by the thread whose `tag` index is 0 unless the buffer is
    per thread, within the stage's spatial guards."""
    inf = plan.info[i]
    red = plan.extra_allocs[i][1]
    conds = guards(plan, i, spatial_only=True, skip_tag=tag)
    if inf.buf.scope != "local":
        conds.append(BinOp("==", ir.THREAD_VARS[tag], int32(0), "bool"))
    idx = plan.flat_index(i, [inf.value[a.name] for a in plan.compute_op(i).axis], relative=False)
    return ir.guarded(ir.Store(inf.buf, idx, Load(red, (int32(0),))), conds)


def cluster_extent(plan: LoweringPlan, i: int) -> int:
    """The extent of stage i's reduction iterator bound to the cluster rank (1: none)."""
    st = plan.stages[i]
    bound = [it for it in st.iters if it.kind != SPATIAL and it.annotation == CLUSTER_RANK_TAG]
    return plan.info[i].ext[bound[0].name] if bound else 1


def online_partner(plan: LoweringPlan, i: int) -> int | None:
    """The statistic stage (a softmax's max, a centred variance's mean) whose cluster exchange
    stage i's makes (online_exchange.py): None where stage i does not ask for it
    (`Stage.online_exchange`); a LoweringError where it asks but cannot."""
    st = plan.stages[i]
    if not st.online_exchange:
        return None
    m, kind, why = partner_read(plan, i)
    if m is not None:
        reducer = getattr(plan.info[m].body, "reducer", None)
        wanted = "sum" if kind == VARIANCE else "max"
        readers = [j for j, o in enumerate(plan.info) if m in o.reads and j != i]
        checks = (  # (refused?, why), first match wins
            (reducer is not BUILTIN_REDUCERS[wanted], f"m is not a {wanted} reduction"),
            (cross_thread_tag(plan, i) is None, "it is no cross-thread reduction"),
            (cross_thread_tag(plan, m) is None, "m is no cross-thread reduction"),
            (cluster_extent(plan, i) < 2, "it is not split over a cluster"),
            (cluster_extent(plan, m) != cluster_extent(plan, i), "m is split otherwise"),
            (st.attach != plan.stages[m].attach, "m is computed at another loop"),
            (bool(inner_spatial(plan, i) or inner_spatial(plan, m)), "a block has a tile"),
            (any(i not in plan.info[j].reads for j in readers), "m has readers before it"),
            (
                kind == VARIANCE and not blocks_split_evenly(plan, i),
                "its blocks' parts of the row differ in size",
            ),
        )
        why = next((w for bad, w in checks if bad), "")
    if why:
        raise LoweringError(f"stage {st.name!r} cannot exchange online with its max or mean: {why}")
    return m


def blocks_split_evenly(plan: LoweringPlan, i: int) -> bool:
    """Whether stage i's cluster splits its reduction into parts of equal size (the row's
    length a multiple of the cluster's blocks), as a merge of block means needs."""
    body = plan.info[i].body
    assert isinstance(body, Reduce)
    length = math.prod(axis.extent for axis in body.axes)
    return length % cluster_extent(plan, i) == 0


def exchanging_partner(plan: LoweringPlan, m: int) -> int | None:
    """The sum stage whose cluster exchange makes statistic stage m's (online_exchange.py), or
    None."""
    return next(
        (
            j
            for j, s in enumerate(plan.stages)
            if s.online_exchange and online_partner(plan, j) == m
        ),
        None,
    )


def block_scale(plan: LoweringPlan, m: int, s: int, cluster: int) -> list[ir.Stmt]:
    """What turns mean stage m's block part into its block's mean before it is stored for
    variance stage s to centre on (`online_exchange.block_mean_scale`); nothing for a max."""
    if partner_read(plan, s)[1] != VARIANCE:
        return []
    red = plan.extra_allocs[m][1]
    scale = Const(block_mean_scale(plan, m, s, cluster), red.dtype)
    zero = int32(0)
    return [ir.Store(red, zero, BinOp("*", Load(red, (zero,)), scale, red.dtype))]


def cluster_exchange(
    plan: LoweringPlan, i: int, pidx: Expr, cluster: int
) -> tuple[ir.Stmt, list[ir.Stmt]]:
    """(publish, fold) of element `pidx` of stage i's tile, around one cluster barrier after
    the tile's AllReduces: every thread stores its block's result in a shared slot (publish);
    after the barrier every thread folds the `cluster` blocks' slots, read through distributed
    shared memory, into its result in rank order (fold), so that every block of the cluster
    holds the same value."""
    name, inf = plan.stages[i].name, plan.info[i]
    red = plan.extra_allocs[i][1]
    tile = plan.extra_allocs[i][0].shape
    slots = ir.Buffer(plan.unique_name(f"{name}_cluster"), tile, inf.buf.dtype, "shared")
    got = ir.Buffer(plan.unique_name(f"{name}_remote"), (1,), inf.buf.dtype, "local")
    plan.extra_allocs[i] += [slots, got]
    rank = Var(plan.unique_name(f"{name}_rank"), I32)
    result, zero = Load(red, (int32(0),)), int32(0)
    combine = ir.Store(red, zero, plan.reduction(i).reducer.combine(result, Load(got, (zero,))))
    gather = ir.seq([ClusterLoad(got, zero, slots, pidx, rank), combine])
    fold: list[ir.Stmt] = [
        ir.Store(red, zero, plan.reduction(i).identity),
        ir.For(rank, cluster, "unroll", gather),
    ]
    return ir.Store(slots, pidx, result), fold
