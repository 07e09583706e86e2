"""Shared predicates of the sketch and init rules (Ansor's search_policy/utils.h): what a stage
is (tiled, inlined, an output...) and which stages read which.

Everything here reads a State; nothing changes one. Stages are named by their index in the
state, as the steps name them.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autosched.schedule.compute_dag import OpInfo, analyse_op
from autosched.schedule.dataflow import consumers_of, reads_of
from autosched.schedule.implicit_gemm import IMPLICIT_GEMM_ORIGIN
from autosched.schedule.loop_state import State
from autosched.schedule.stage import (
    ATTACHED,
    CLUSTER_RANK_TAG,
    INLINED,
    REDUCE,
    ROOT,
    SplitRel,
    Stage,
)

# Names that moved to the modules of their ideas (settings, factorisations, the steps of a
# stage), importable from here as before.
from autosched.sketch.factorization import (
    PAD_MIN_EXTENT,
    PAD_MULTIPLE,
    divisors,
    factorization_schemes,
    pick,
    tiling_extents,
)
from autosched.sketch.params import SketchParams
from autosched.sketch.stage_steps import (
    SPLITTING_STEPS,
    level_names,
    next_annotates,
    split_step_ids,
    splitting_steps,
    stage_index_history,
)
from autosched.te.dtype import BYTES
from autosched.te.expr import Load, Reduce
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import substitute, walk

# the origins of stages that compute what a DAG op computed, in a new op (analysed on demand)
DERIVED_ORIGINS = ("rfactor", IMPLICIT_GEMM_ORIGIN)


def stage_op_info(state: State, i: int) -> OpInfo | None:
    """The DAG analysis of stage i's computation: its own op's, or for the `local` stage a
    cache_write made, the analysis of the op it computes. None for cache_read copies and for
    the copy-out stage of a cache_write (they only move data)."""
    stage = state.stages[i]
    info = _op_info(state, stage.op, stage.origin)
    if info is not None or stage.origin != "cache_write":
        return info
    # The copy-out stage reads the local stage and produces the original op.
    for other in state.stages:
        body = getattr(other.op, "body", None)
        if (
            isinstance(body, Load)
            and isinstance(body.buffer, Tensor)
            and body.buffer.op is stage.op
        ):
            return _op_info(state, other.produces, other.origin)
    return None


def _op_info(state: State, op, origin: str) -> OpInfo | None:
    """The DAG's analysis of `op`; an rfactor stage's partial sums and an implicit GEMM's
    stages, not in the DAG, are analysed here (they are tiled as the computation they replace,
    unless an rfactor stage's only inputs it would re-read are along axes of length 1: a
    cross-block reduction's parts)."""
    info = state.dag.info.get(id(op))
    if info is not None or origin not in DERIVED_ORIGINS:
        return info
    info = analyse_op(op, False)
    if origin == "rfactor" and info.needs_multi_level_tiling and not _reuses(op):
        info = replace(info, needs_multi_level_tiling=False)
    return info


def needs_multi_level_tiling(state: State, i: int) -> bool:
    info = stage_op_info(state, i)
    return (
        info is not None and info.needs_multi_level_tiling and state.stages[i].compute_at != INLINED
    )


def is_output(state: State, i: int) -> bool:
    """True for the stage that writes a DAG output (after a cache_write: the copy-out stage)."""
    produces = state.stages[i].produces
    return any(produces is op for op in state.dag.outputs)


def has_reduce_iter(stage: Stage) -> bool:
    return any(it.kind == REDUCE for it in stage.root_iters)


def is_inlined(stage: Stage) -> bool:
    return stage.compute_at == INLINED


def is_tiled(stage: Stage) -> bool:
    """True once a stage has been split (Ansor's IsTiled)."""
    return any(isinstance(r, SplitRel) for r in stage.relations)


def untiled_dag_reduction(stage: Stage) -> bool:
    """Whether `stage` is a reduction of the DAG's own (not a cache or rfactor stage) not yet
    split: what the rules that cut a reduction into parts (split-K, cross-block) start from."""
    return (
        stage.origin == "dag"
        and isinstance(stage.op, ComputeOp)
        and has_reduce_iter(stage)
        and not is_tiled(stage)
    )


def spatial_and_reduce_length(stage: Stage) -> tuple[int, int]:
    """Products of the root spatial and reduction extents (those of the op's axes)."""
    if not isinstance(stage.op, ComputeOp):
        return 1, 1
    sp = math.prod(a.extent for a in stage.op.axis)
    rd = math.prod(a.extent for a in stage.op.reduce_axis)
    return sp, rd


def vector_lanes(stage: Stage, max_bytes: int, reads_only: bool = False) -> int:
    """Elements of the stage's widest input or output (with `reads_only`, input: a reduction
    stores its vector's lanes into one accumulator) that fit in `max_bytes` (16: one 128-bit
    access); 1 when none fit twice."""
    op = stage.compute_op
    widest = max(
        [0 if reads_only else BYTES.get(op.dtype, 4)]
        + [BYTES.get(n.dtype, 4) for n in walk(op.body) if isinstance(n, Load)]
    )
    return max(1, max_bytes // max(widest, 1))


def reuses_inputs(stage: Stage) -> bool:
    """Ansor's multi-level tiling test (two or more spatial axes left out of the reads of a
    reduction), counting only axes longer than 1: a whole-matrix sum kept as a (1,) tensor
    leaves out its unit axis, which re-reads nothing."""
    return _reuses(stage.op)


def op_reuses_inputs(op) -> bool:
    """`reuses_inputs` of an op itself (a DAG's, before a rewrite such as rfactor)."""
    return _reuses(op)


def _reuses(op) -> bool:
    if not isinstance(op, ComputeOp) or not isinstance(op.body, Reduce):
        return False
    missing = 0
    for node in walk(op.body):
        if isinstance(node, Load) and isinstance(node.buffer, Tensor):
            used = {id(v) for idx in node.indices for v in walk(idx)}
            missing += sum(1 for a in op.axis if a.extent > 1 and id(a) not in used)
    return missing >= 2


def unread_axes(stage: Stage) -> list:
    """The spatial axes (longer than 1) that no read of the reduction's inputs indexes: its
    outputs along them come from the same reads (the moments axis of
    layer_norm(moments=True): the mean of x and of x^2 from one read of x)."""
    op = stage.op
    if not isinstance(op, ComputeOp) or not isinstance(op.body, Reduce):
        return []
    used: set[int] = set()
    for node in walk(op.body):
        if isinstance(node, Load) and isinstance(node.buffer, Tensor):
            used |= {id(v) for idx in node.indices for v in walk(idx)}
    return [a for a in op.axis if a.extent > 1 and id(a) not in used]


def is_column_reduction(stage: Stage) -> bool:
    """True when no read of the stage's reduction indexes its last dimension with a reduction
    axis: the reduction runs across memory rows (a column sum), so consecutive outputs, not
    consecutive reduction steps, read consecutive addresses."""
    if not isinstance(stage.op, ComputeOp):
        return False
    reduce_ids = {id(a) for a in stage.op.reduce_axis}
    for node in walk(stage.op.body):
        if isinstance(node, Load) and isinstance(node.buffer, Tensor) and node.indices:
            if any(id(v) in reduce_ids for v in walk(node.indices[-1])):
                return False
    return True


def attach_target(state: State, i: int) -> int:
    """The stage whose loop stage i is computed at, or i itself when it is not attached."""
    attach = state.stages[i].attach
    return attach[0] if state.stages[i].compute_at == ATTACHED and attach is not None else i


def has_cache_write_stage(state: State, i: int) -> bool:
    """True for the `local` stage a cache_write created (Ansor's HasCacheWriteStage)."""
    return state.stages[i].origin == "cache_write"


def consumers(state: State, i: int) -> list[int]:
    """Stages that read stage i's result, looking through inlined stages (Ansor's GetConsumers)."""
    out: set[int] = set()
    todo, seen = [i], {i}
    while todo:
        for c in consumers_of(state, todo.pop()):
            if c in seen:
                continue
            seen.add(c)
            if is_inlined(state.stages[c]):
                todo.append(c)
            else:
                out.add(c)
    return sorted(out)


def direct_producers(state: State, i: int) -> set[int]:
    return reads_of(state, i)


def single_consumer_root(state: State, i: int) -> int | None:
    """Stage i's single consumer, or the one stage all its consumers are computed at or are
    (Ansor's GetSingleConsumerId); None when there is no such stage."""
    roots = {attach_target(state, c) for c in consumers(state, i)}
    return roots.pop() if len(roots) == 1 else None


def _leading_axes_read(state: State, producer: int, consumer: int) -> int:
    """How many leading axes of `producer` every direct read of it in `consumer`'s body
    indexes with the consumer's own axis of the same position and extent."""
    prod, cons = state.stages[producer], state.stages[consumer]
    redirect = {id(a): b for a, b in cons.redirects}
    axes = cons.axes
    best = len(prod.axes)
    for node in walk(cons.compute_op.body):
        if not (isinstance(node, Load) and isinstance(node.buffer, Tensor)):
            continue
        if redirect.get(id(node.buffer.op), node.buffer.op) is not prod.produces:
            continue
        n = 0
        for idx, a, p in zip(node.indices, axes, prod.axes, strict=False):
            if idx is not a or a.extent != p.extent:
                break
            n += 1
        best = min(best, n)
    return best


def common_outer_iters(state: State, i: int, target: int) -> int:
    """The number of leading axes stage i shares with stage `target` along every chain of
    reads from i to target (Ansor's GetNumCommonOuterIterator); 0 when target does not read i."""
    found: list[int] = []

    def visit(k: int, n: int) -> None:
        if k == target:
            found.append(n)
            return
        for c in consumers_of(state, k):
            visit(c, min(n, _leading_axes_read(state, k, c)))

    visit(i, len(state.stages[i].axes))
    return min(found) if found else 0


def has_cross_thread_reduction(state: State, i: int) -> bool:
    """True when stage i, or a stage computed at one of its loops, binds a reduction
    iterator to threadIdx.x (Ansor's HasCrossThreadReduction)."""

    def binds(stage: Stage) -> bool:
        return any(it.kind == REDUCE and it.annotation == "threadIdx.x" for it in stage.iters)

    return binds(state.stages[i]) or any(
        s.compute_at == ATTACHED and s.attach is not None and s.attach[0] == i and binds(s)
        for s in state.stages
    )


def row_part_in_registers(state: State, j: int) -> int:
    """The elements of a row (or of a cluster block's part of it) that stage j holds in its
    block's registers: a thread-private cache (a local `cache_read` attached at a loop of a
    root stage, its own iterators bound to threadIdx; sketch/row_in_shared.py), its tensor's
    elements past the axes that loop and those outside it fix, over C at a cluster's rank
    iterator. A cache of fewer axes than the root (a layer norm's gamma, read along the row)
    lines its axes up with the root's last ones. 0 for any other stage."""
    stage = state.stages[j]
    if (
        stage.scope != "local"
        or stage.origin != "cache_read"
        or stage.attach is None
        or not any(it.annotation.startswith("threadIdx") for it in stage.iters)
    ):
        return 0
    root, at_name = stage.attach
    its = state.stages[root].iters
    at, parts = [it.name for it in its].index(at_name), 1
    if its[at].annotation == CLUSTER_RANK_TAG:
        at, parts = at - 1, its[at].extent or 1
    shape = stage.op.output(0).shape
    missing = len(state.stages[root].op.output(0).shape) - len(shape)
    return -(-math.prod(shape[max(0, at + 1 - missing) :]) // parts)


def loads_through_inlined(state: State, j: int, target: int) -> list[tuple]:
    """Index tuples (in stage j's own axes) of every read of stage `target`'s result in stage
    j's body, with inlined stages substituted."""
    tgt_op = state.stages[target].produces
    found: list[tuple] = []

    def visit(k: int, mapping: dict) -> None:
        stage = state.stages[k]
        redirect = {id(a): b for a, b in stage.redirects}
        for node in walk(stage.compute_op.body):
            if not (isinstance(node, Load) and isinstance(node.buffer, Tensor)):
                continue
            op = redirect.get(id(node.buffer.op), node.buffer.op)
            idx = tuple(substitute(x, mapping) if mapping else x for x in node.indices)
            if op is tgt_op:
                found.append(idx)
                continue
            p = state.stage_of_producer(op)
            producer = state.stages[p]
            if is_inlined(producer) and isinstance(producer.op, ComputeOp):
                visit(p, dict(zip(producer.op.axis, idx, strict=False)))

    visit(j, {})
    return found


def elementwise_matched_consumer(state: State, i: int) -> int | None:
    """The single consumer of stage i when it reads i element-wise: same spatial shape, no
    reduction, and every read indexes with its own axes in order (Ansor's
    HasSingleElementwiseMatchedConsumer). None otherwise."""
    cons = consumers(state, i)
    if len(cons) != 1:
        return None
    j = cons[0]
    stage, consumer = state.stages[i], state.stages[j]
    if not isinstance(consumer.op, ComputeOp) or isinstance(consumer.op.body, Reduce):
        return None
    if consumer.compute_at != ROOT and consumer.compute_at != ATTACHED:
        return None
    shape = tuple(a.extent for a in stage.axes)
    if tuple(a.extent for a in consumer.op.axis) != shape:
        return None
    reads = loads_through_inlined(state, j, i)
    axes = consumer.op.axis
    if not reads or any(
        len(idx) != len(axes) or any(x is not a for x, a in zip(idx, axes, strict=True))
        for idx in reads
    ):
        return None
    return j


__all__ = [
    "row_part_in_registers",
    "PAD_MIN_EXTENT",
    "PAD_MULTIPLE",
    "SPLITTING_STEPS",
    "SketchParams",
    "attach_target",
    "common_outer_iters",
    "consumers",
    "direct_producers",
    "divisors",
    "elementwise_matched_consumer",
    "factorization_schemes",
    "has_cache_write_stage",
    "has_cross_thread_reduction",
    "has_reduce_iter",
    "is_column_reduction",
    "is_inlined",
    "is_output",
    "is_tiled",
    "level_names",
    "loads_through_inlined",
    "needs_multi_level_tiling",
    "next_annotates",
    "pick",
    "reuses_inputs",
    "single_consumer_root",
    "spatial_and_reduce_length",
    "split_step_ids",
    "splitting_steps",
    "stage_index_history",
    "stage_op_info",
    "tiling_extents",
    "unread_axes",
    "vector_lanes",
]
