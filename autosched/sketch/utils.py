"""Shared predicates and helpers of the sketch and init rules (Ansor's search_policy/utils.h).

Everything here reads a State; nothing changes one. Stages are named by their index in the
state, as the steps name them.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autosched.schedule.compute_dag import OpInfo, analyse_op
from autosched.schedule.dataflow import consumers_of, reads_of
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, INLINED, REDUCE, ROOT, SPATIAL, SplitRel, Stage
from autosched.schedule.steps import (
    STEP_REGISTRY,
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    SplitStep,
)
from autosched.te.expr import Load, Reduce
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import substitute, walk

if TYPE_CHECKING:
    from autosched.task.search_task import SearchTask


@dataclass(frozen=True)
class SketchParams:
    """Knobs of sketch generation and random annotation (one place, no environment variables).

    `gpu_structure`: the multi-level tiling structure; `S` levels split spatial iterators, `R`
    levels reduction iterators (Ansor's GPU default `SSSRRSRS`). The first three `S` levels are
    bound to blockIdx.x, vthread and threadIdx.x by the init rules.
    """

    gpu_structure: str = "SSSRRSRS"
    max_innermost_split_factor: int = 64
    # auto_unroll_max_step depths of CUDA-core stages (fresh draws and the unroll mutation).
    # Ansor's GPU menu also has 0 and 16, which no fp32 suite workload's fastest kernels need
    # (the deep depths come within 2% of them) and which make a random state slower, often
    # severalfold, than its tiling can be, so that a search judging a tiling by its first
    # states leaves good ones (benchmarks/results/2026-11-25_ac187f9_h100/note.md)
    auto_unroll_configs: tuple[int, ...] = (64, 512, 1024)
    # the depths of Tensor Core stages, whose fastest kernels use every depth, 0 included
    tensor_core_unroll_configs: tuple[int, ...] = (0, 16, 64, 512, 1024)
    thread_counts: tuple[int, ...] = (32, 64, 128, 256, 512)
    # threads of a cross-thread reduction (multiples of the warp size; the init rules use
    # those up to the first that covers the reduction and the block limit)
    cross_thread_counts: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    vector_lengths: tuple[int, ...] = (1, 2, 4)
    max_vector_bytes: int = 16
    # elements of `local` buffers per thread: on the H100, 1000 random matmul states with more than
    # 128 spilled 2-5x as often (25-70%) and none was among the 10 fastest
    max_local_elems: int = 128
    # the fewest threads per SM a fresh sample's tiled stage launches: its accumulators per thread
    # are kept to at most the stage's outputs / (SMs x this) (at least one), since threads in all
    # = outputs / accumulators. Random tile sizes put most samples of small-output stages in
    # launches of a few thousand threads, where no suite log's fastest kernels lie
    # (benchmarks/log_progress.py --threads). At 64, five 256-trial searches per workload on the
    # H100 spread less on the four small-output workloads measured (conv2d_bias_relu,
    # conv2d_7x7s2, batch_matmul, depthwise), the slow mode of the many-channel conv2d_bias_relu
    # gone, means 6-20% faster except depthwise (13% slower). 0 leaves the accumulators to
    # `max_local_elems`.
    min_threads_per_sm: int = 64
    # whether a tiled stage's accumulators per thread are first capped at the budget above or
    # its half, quarter or eighth (not below 8), drawn uniformly, before the axes are drawn
    # under that cap: uniform factorisations of each axis put most fresh samples at the budget
    # (conv2d_7x7s2: 58% at 64), far from where the fastest kernels of some workloads lie
    # (conv2d_7x7s2's at 8-16)
    spread_accumulators: bool = False
    # statements once unrolled: on the H100, random conv2d states above 2048 spilled 69-75% of the
    # time, took up to 20 s to compile, and none was among the 10 fastest. Between 1536 and 2048
    # (78 of the 2640 cost-model dataset states, NVRTC, 15 at once): 1.8-4.1 s mean compile
    # (0.6-1.2 s below), 42-91% of matmul and conv2d ones spilled, 18 ran past the 4 s timeout;
    # the 20 fastest kernels of every suite log and the top 5% of every dataset have <= 1325
    max_unrolled_statements: int = 1536
    # the chance that AutoUnroll draws a tiled stage's unroll depth from every config instead of
    # those whose estimated unrolled registers fit: the estimate counts the unrolled nest's whole
    # operand tiles as live, and ptxas often keeps far fewer. On matmul-like workloads it rejects
    # more depths that compile clean than depths that spill, and most of the fastest matmul,
    # batch_matmul and conv2d_7x7s2 kernels of the suite logs use a depth it rejects (the
    # mutations reach those depths, fresh samples do not); on many-channel convolutions most of
    # what it rejects spills (benchmarks/unroll_budget.py). 0 keeps the estimate's verdict: at
    # 0.5, 256-trial searches of those workloads ended no faster and no closer together.
    unroll_over_budget_probability: float = 0.0
    tile_retries: int = 64  # resamples of one stage's tile sizes before the state is dropped
    # float32 matrix products may use TF32 Tensor Cores (the task's `allow_tf32`; off: exact
    # float32 arithmetic)
    allow_tf32: bool = False
    # the chance that the shared caches of one attach loop are double-buffered (fetched one
    # iteration ahead, asynchronously where the GPU can)
    double_buffer_probability: float = 0.5
    # the chance that a shared cache of a multi-level tiled (non-Tensor-Core) sketch whose rows
    # line up on the same banks gets its rows padded (SharedPadding): even odds, as whether the
    # conflicts cost more than the padding's shared memory depends on how the warp walks the tile
    shared_padding_probability: float = 0.5
    # split-K: a reduction with fewer outputs than `split_k_max_outputs` is also sketched with
    # its reduction cut into each of `split_k_parts` parts (where every part keeps at least
    # `split_k_min_chunk` elements), summed by a second kernel. 65536 outputs at one or two
    # accumulators a thread hold under a quarter of the threads an H100 or H200 keeps resident
    # (132 SMs x 2048): too few to fill it, as the seed's conv2d+bias+relu (25,088 outputs of
    # 4,608-long sums), whose 16-part split runs about twice as fast as its unsplit kernels
    split_k_parts: tuple[int, ...] = (4, 16)
    split_k_max_outputs: int = 65536
    split_k_min_chunk: int = 256
    # cut only the outermost reduction axis (where the parts divide it) instead of all of them
    # fused: the partial sums of a convolution then keep its window axes, so their tiles stay
    # aligned with the window and their indices free of divisions by it (faster kernels, and
    # builds several times faster, on the seed's layer)
    split_k_outer_axis: bool = True

    def __post_init__(self) -> None:
        for name in (
            "double_buffer_probability",
            "shared_padding_probability",
            "unroll_over_budget_probability",
        ):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"SketchParams: {name} must be in [0, 1], got {value}")
        for name in ("auto_unroll_configs", "tensor_core_unroll_configs"):
            configs = getattr(self, name)
            if not configs or min(configs) < 0:
                raise ValueError(
                    f"SketchParams: {name} must be one or more depths >= 0, got {configs}"
                )
        if self.min_threads_per_sm < 0:
            raise ValueError(
                f"SketchParams: min_threads_per_sm must be >= 0, got {self.min_threads_per_sm}"
            )

    @classmethod
    def for_task(cls, task: SearchTask) -> SketchParams:
        """The defaults, with a task's options that reach the sketch rules (its `allow_tf32`)."""
        return cls(allow_tf32=task.allow_tf32)

    @property
    def n_spatial_levels(self) -> int:
        return self.gpu_structure.count("S")

    @property
    def n_reduce_levels(self) -> int:
        return self.gpu_structure.count("R")


# ---- factorisation --------------------------------------------------------------------------


@functools.cache
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of n, ascending."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return tuple(small + large[::-1])


def pick(options: Sequence, rng: random.Random):
    """One of `options`, uniformly (one `rng.random()` draw)."""
    return options[int(rng.random() * len(options))]


def level_names(root: str, n_levels: int) -> list[str]:
    """Names of the parts of `root` split into `n_levels` (outer to inner), as SplitStep names
    them: x_o_o, x_o_i, x_i for three levels."""
    n = n_levels - 1
    return [root + "_o" * n] + [root + "_o" * (n - k) + "_i" for k in range(1, n + 1)]


def next_annotates(steps: Sequence, k: int, step: SplitStep, annotation: str) -> bool:
    """Does the step after split k (`step`) annotate the split's innermost part `annotation`
    (a split then vectorised, bound to threadIdx.x, ...)? `steps` are Steps or their records."""
    if k + 1 >= len(steps):
        return False
    nxt = steps[k + 1]
    if isinstance(nxt, tuple):  # a record
        if nxt[0] != AnnotationStep.TAG:
            return False
        nxt = AnnotationStep(*nxt[1:])
    elif not isinstance(nxt, AnnotationStep):
        return False
    return (
        nxt.stage_id == step.stage_id
        and nxt.iter_id == step.iter_id + len(step.lengths)
        and nxt.annotation == annotation
    )


@functools.cache
def factorization_schemes(
    extent: int, n_lengths: int, max_innermost: int
) -> tuple[tuple[int, ...], ...]:
    """Every perfect tiling of `extent` into `n_lengths` inner lengths (outer to inner): tuples
    whose product divides `extent` (the outermost part takes the rest) and whose last entry is at
    most `max_innermost`. Cached: the search asks for the same few extents millions of times."""
    if n_lengths == 0:
        return ((),)
    out: list[tuple[int, ...]] = []
    for last in divisors(extent):
        if last > max_innermost:
            break
        for head in factorization_schemes(extent // last, n_lengths - 1, extent):
            out.append(head + (last,))
    return tuple(out)


# An extent over PAD_MIN_EXTENT that is not a multiple of PAD_MULTIPLE (1023, 999, 112) may also be
# tiled as if it were the next multiple: its divisors alone would leave odd or tiny tiles, and the
# overhanging iterations cost only guards (lowering adds them for any split that does not divide).
PAD_MULTIPLE = 32
PAD_MIN_EXTENT = 64


@functools.cache
def tiling_extents(extent: int) -> tuple[int, ...]:
    """The extents a spatial split of `extent` may be tiled for: itself, and its next multiple
    of PAD_MULTIPLE when it is over PAD_MIN_EXTENT and not a multiple already."""
    if extent > PAD_MIN_EXTENT and extent % PAD_MULTIPLE:
        return (extent, -(-extent // PAD_MULTIPLE) * PAD_MULTIPLE)
    return (extent,)


# ---- stage predicates -----------------------------------------------------------------------


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
    """The DAG's analysis of `op`; an rfactor stage's partial sums, not in the DAG, are
    analysed here (they are tiled as the reduction they split)."""
    info = state.dag.info.get(id(op))
    return analyse_op(op, False) if info is None and origin == "rfactor" else info


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


def spatial_and_reduce_length(stage: Stage) -> tuple[int, int]:
    """Products of the root spatial and reduction extents."""
    sp = math.prod(it.extent for it in stage.root_iters if it.kind == SPATIAL)
    rd = math.prod(it.extent for it in stage.root_iters if it.kind == REDUCE)
    return sp, rd


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
    roots = {
        c if state.stages[c].compute_at != ATTACHED else state.stages[c].attach[0]
        for c in consumers(state, i)
    }
    return roots.pop() if len(roots) == 1 else None


def _leading_axes_read(state: State, producer: int, consumer: int) -> int:
    """How many leading axes of `producer` every direct read of it in `consumer`'s body
    indexes with the consumer's own axis of the same position and extent."""
    prod, cons = state.stages[producer], state.stages[consumer]
    redirect = {id(a): b for a, b in cons.redirects}
    axes = cons.op.axis
    best = len(prod.op.axis)
    for node in walk(cons.op.body):
        if not (isinstance(node, Load) and isinstance(node.buffer, Tensor)):
            continue
        if redirect.get(id(node.buffer.op), node.buffer.op) is not prod.produces:
            continue
        n = 0
        for idx, a, p in zip(node.indices, axes, prod.op.axis, strict=False):
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

    visit(i, len(state.stages[i].op.axis))
    return min(found) if found else 0


def has_cross_thread_reduction(state: State, i: int) -> bool:
    """True when stage i, or a stage computed at one of its loops, binds a reduction
    iterator to threadIdx.x (Ansor's HasCrossThreadReduction)."""

    def binds(stage: Stage) -> bool:
        return any(it.kind == REDUCE and it.annotation == "threadIdx.x" for it in stage.iters)

    return binds(state.stages[i]) or any(
        s.compute_at == ATTACHED and s.attach[0] == i and binds(s) for s in state.stages
    )


def loads_through_inlined(state: State, j: int, target: int) -> list[tuple]:
    """Index tuples (in stage j's own axes) of every read of stage `target`'s result in stage
    j's body, with inlined stages substituted."""
    tgt_op = state.stages[target].produces
    found: list[tuple] = []

    def visit(k: int, mapping: dict) -> None:
        stage = state.stages[k]
        redirect = {id(a): b for a, b in stage.redirects}
        for node in walk(stage.op.body):
            if not (isinstance(node, Load) and isinstance(node.buffer, Tensor)):
                continue
            op = redirect.get(id(node.buffer.op), node.buffer.op)
            idx = tuple(substitute(x, mapping) if mapping else x for x in node.indices)
            if op is tgt_op:
                found.append(idx)
                continue
            p = state.stage_of_producer(op)
            if is_inlined(state.stages[p]) and isinstance(state.stages[p].op, ComputeOp):
                visit(p, dict(zip(state.stages[p].op.axis, idx, strict=False)))

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
    shape = tuple(a.extent for a in stage.op.axis)
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


# ---- steps of a stage -----------------------------------------------------------------------


def stage_index_history(state: State) -> list[int]:
    """For each step k, the index that step k's stage has in the final state (-1 when the
    stage index is not tracked). Cache steps insert stages and shift later indices; this undoes
    that, so rules can find "the splits of stage i" in a list of steps."""
    # ident[p] = stable id of the stage at position p, after the steps applied so far
    n0 = len(state.dag.ops)
    ident = list(range(n0))
    next_id = n0
    at_step: list[int] = []
    for step in state.steps:
        at_step.append(ident[step.stage_id])
        if isinstance(step, CacheReadStep):
            ident.insert(step.stage_id + 1, next_id)
            next_id += 1
        elif isinstance(step, CacheWriteStep):
            ident.insert(step.stage_id, next_id)  # the new local stage takes the old position
            next_id += 1
        elif type(step) is STEP_REGISTRY.get("RF"):  # rfactor adds a stage before its target
            ident.insert(step.stage_id, next_id)
            next_id += 1
    final = {sid: p for p, sid in enumerate(ident)}
    return [final.get(sid, -1) for sid in at_step]


SPLITTING_STEPS = (SplitStep, FollowSplitStep, FollowFusedSplitStep)


def splitting_steps(state: State, i: int) -> list[tuple[int, SplitRel]]:
    """(step id, relation) of every split of stage i (SplitStep or a follow split), in order."""
    where = stage_index_history(state)
    rels = [r for r in state.stages[i].relations if isinstance(r, SplitRel)]
    mine = [
        k for k, s in enumerate(state.steps) if isinstance(s, SPLITTING_STEPS) and where[k] == i
    ]
    return list(zip(mine, rels, strict=False))


def split_step_ids(state: State, i: int, kind: str | None = None) -> list[int]:
    """Ids of the SplitSteps on stage i, in order; with `kind`, only those that split a root
    iterator of that kind (spatial / reduce)."""
    root_kind = {it.name: it.kind for it in state.stages[i].root_iters}
    return [
        k
        for k, rel in splitting_steps(state, i)
        if isinstance(state.steps[k], SplitStep)
        and (kind is None or root_kind.get(rel.parent) == kind)
    ]


def cross_thread_splits(state: State) -> dict[int, int]:
    """SplitStep id -> reduction length, for each split that sets the thread count of a
    cross-thread reduction: the split of a reduction iterator whose inner part is bound to
    threadIdx.x, or the split such a reduction follows (its consumer's)."""
    out: dict[int, int] = {}
    for i, stage in enumerate(state.stages):
        bound = {
            it.name for it in stage.iters if it.kind == REDUCE and it.annotation == "threadIdx.x"
        }
        for k, rel in splitting_steps(state, i):
            if rel.children[-1] not in bound:
                continue
            step = state.steps[k]
            src = step.src_step_id if isinstance(step, FollowSplitStep) else k
            if isinstance(state.steps[src], SplitStep):
                out[src] = max(out.get(src, 0), spatial_and_reduce_length(stage)[1])
    return out
