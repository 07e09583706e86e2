"""The sketch rules for reductions that are not multi-level tiled as they are: a reduction
split among a block's threads (`CrossThreadReduction`), and a long reduction with few outputs
cut into parts computed by many blocks, tiled (`SplitKReduction`) or not
(`CrossBlockReduction`, in cross_block.py)."""

from __future__ import annotations

import math
from typing import ClassVar

from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, REDUCE, ROOT, SPATIAL
from autosched.sketch.rule_base import Cond, SketchContext, SketchRule
from autosched.sketch.stage_steps import level_names, split_at, split_step_ids
from autosched.sketch.tensor_core import (
    MMA,
    match_implicit_gemm,
    match_tensor_core,
)
from autosched.sketch.utils import (
    common_outer_iters,
    direct_producers,
    elementwise_matched_consumer,
    has_cache_write_stage,
    has_reduce_iter,
    is_column_reduction,
    is_inlined,
    is_output,
    is_tiled,
    needs_multi_level_tiling,
    reuses_inputs,
    single_consumer_root,
    spatial_and_reduce_length,
    unread_axes,
    untiled_dag_reduction,
    vector_lanes,
)
from autosched.te.tensor import ComputeOp


def moments(stage) -> int:
    """How many outputs of the stage come from each read of its inputs (`unread_axes`: 2 for
    a layer norm's moments, 1 for a sum)."""
    return math.prod(a.extent for a in unread_axes(stage))


class CrossThreadReduction(SketchRule):
    """Ansor's cross-thread reduction, for a reduction with little spatial parallelism (a
    stage to tile whose spatial length is below its reduction length and fits in a block) or
    a long one (over a warp): fuse the reduction iterators, split them by a thread count (the
    init rules draw it) and bind the inner part to threadIdx.x, so that a block's threads
    share each reduction. When the stage's consumers have one root that needs no tiling
    and shares leading axes with it, that root's last axis is split by the thread count
    (inner part on threadIdx.x) unless a reduction fused before already did, the reduction
    follows that split and is computed at the last shared axis: one kernel, whose shared
    spatial loops the init rules bind to blockIdx.x. When that consumer has no split yet and
    shares all its axes with the reduction (one consumer element per reduction output), a
    second sketch computes the reduction at the consumer's last axis without splitting it: one
    output element per block, all of the block's threads on its reduction. This suits a
    matrix-vector product: the first sketch has a block's threads reduce one output after
    another, so there are too few blocks to keep most SMs busy. Where the reduction has its
    own thread split (no consumer to follow, or one output per block), a further sketch has
    each thread read 16 bytes of consecutive reduction steps at once (`own_thread_splits`);
    and for a DAG output, or one computed inside a consumer with one element per output,
    one more puts its outputs on the warps of a block, a warp per output (`rows_on_warps`;
    for a row sum, also 2 and 4 outputs per warp, read together).
    APPLY: the other rules (tiling, or leaving the stage to one thread per element) are tried
    as well, but for a cross-block row reduction's partial sums (`row_parts`) and the sum of
    many parts into a few outputs (`many_parts`)."""

    # a warp per output only where the outputs give every SM this many warps: fewer rows (a
    # few long ones) leave most of the GPU idle, and are the cross-block reductions' case
    MIN_WARPS_PER_SM: ClassVar[int] = 8

    def condition(self, ctx, state, i):
        stage = state.stages[i]
        if (
            not isinstance(stage.op, ComputeOp)
            or is_inlined(stage)
            or stage.compute_at == ATTACHED  # placed by an earlier rule (softmax_fusion.py)
            or not has_reduce_iter(stage)
            or has_cache_write_stage(state, i)
        ):
            return Cond.SKIP
        space, red = spatial_and_reduce_length(stage)
        if needs_multi_level_tiling(state, i):
            wanted = space < red and space <= ctx.hardware.max_threads_per_block
        else:
            wanted = red > ctx.hardware.warp_size
        if not wanted:
            return Cond.SKIP
        if self.row_parts(state, i) or self.many_parts(ctx, state, i):
            return Cond.APPLY_AND_SKIP_REST
        return Cond.APPLY

    # the most parts of a cross-block reduction a thread may sum alone (`many_parts`)
    MAX_LOOP_PARTS: ClassVar[int] = 64

    @classmethod
    def many_parts(cls, ctx: SketchContext, state: State, i: int) -> bool:
        """Is stage i the sum of more than `MAX_LOOP_PARTS` parts of a cross-block reduction
        (its producer an rfactor stage) for fewer outputs than a warp (a whole sum, a norm)?
        Those get only this rule's sketches: left to a thread per output (the other rules),
        each output is P loads from L2, issued some 70 at a time, then a chain of P dependent
        additions: for 512 parts a microsecond or two at the end of every call, where a
        cross-thread sum takes one round of loads and a few shuffles."""
        space, red = spatial_and_reduce_length(state.stages[i])
        return (
            red > cls.MAX_LOOP_PARTS
            and space < ctx.hardware.warp_size
            and any(state.stages[p].origin == "rfactor" for p in direct_producers(state, i))
        )

    @staticmethod
    def row_parts(state: State, i: int) -> bool:
        """Is stage i the partial sums of a cross-block reduction along memory rows (a sum, a
        norm, a few long rows, a matrix-vector product cut by CrossBlockReduction)? Those get
        only this rule's sketches: the parts are as many as a few blocks per SM want, so that
        left to one thread per part (the other rules) the whole GPU would run a few hundred
        threads, each reading a long part of its own, no two of a warp in the same line. A
        column reduction's parts keep their thread per (part, column)."""
        stage = state.stages[i]
        return (
            stage.origin == "rfactor"
            and not needs_multi_level_tiling(state, i)
            and not is_column_reduction(stage)
        )

    def apply(self, ctx, state, i):
        reduce_iters = [it.name for it in state.stages[i].iters if it.kind == REDUCE]
        if len(reduce_iters) > 1:
            state = state.fuse(i, reduce_iters)
        fused = next(it.name for it in state.stages[i].iters if it.kind == REDUCE)
        target = self.fusible_consumer(state, i)
        if target is None:
            own = [
                self.moments_inside_steps(split, i)
                for split in self.own_thread_splits(ctx, state, i, fused)
            ]
            return [(split, i - 1) for split in own + self.rows_on_warps(ctx, state, i, fused)]
        t, n_common = target
        one_per_block = not split_step_ids(state, t) and n_common == len(state.stages[t].iters)
        out = []
        if one_per_block:
            for per_block in self.own_thread_splits(ctx, state, i, fused):
                at = per_block.stages[t].iters[n_common - 1].name
                out.append((per_block.compute_at(i, t, at), i - 1))
        warps = self.rows_on_warps(ctx, state, i, fused, t) if one_per_block else []
        followed = []
        for consumer, split in self.thread_splits(ctx, state, i, t):
            n = len(split_at(consumer.steps, split).lengths)  # 1: threads; 2: and lanes
            names = level_names(fused, n + 1)
            st = consumer.follow_split(i, fused, split, n).bind(i, names[1], "threadIdx.x")
            if n == 2:
                st = st.vectorize(i, names[2])
            st = self.outputs_inside_steps(st, i, n_common)
            followed.append((st.compute_at(i, t, st.stages[t].iters[n_common - 1].name), i - 1))
        return followed[:1] + out + followed[1:] + [(st, i - 1) for st in warps]

    def own_thread_splits(
        self, ctx: SketchContext, state: State, i: int, fused: str
    ) -> list[State]:
        """The fused reduction iterator split by a thread count of its own (inner part on
        threadIdx.x); and, where its inputs allow vectors, split [threads, lanes] with each
        thread's lanes (consecutive reduction steps) vectorised: 16-byte reads."""
        out = [state.split(i, fused, [None]).bind(i, fused + "_i", "threadIdx.x")]
        lanes = self.vector_lanes(ctx, state, i)
        if lanes > 1:
            _, threads, vector = level_names(fused, 3)
            vec = state.split(i, fused, [None, lanes]).bind(i, threads, "threadIdx.x")
            out.append(vec.vectorize(i, vector))
        return out

    def rows_on_warps(
        self, ctx: SketchContext, state: State, i: int, fused: str, consumer: int | None = None
    ) -> list[State]:
        """Several outputs per block, one per warp, for a reduction that runs along memory and
        is a DAG output (a row sum) or is computed inside an element-wise `consumer` with one
        element per output (a matrix-vector product and its cast): the outputs' loops (the
        consumer's, where there is one) fused and split by an unknown row count bound to
        threadIdx.y, the reduction split [warp, lanes] with the warp on threadIdx.x and each
        lane's consecutive steps vectorised (16 bytes a read, when the reduction has a vector
        for every lane), and computed at the consumer's row loop. Each output is then a warp
        reduction (shuffles, no shared memory or barrier) and a block reads as many rows as it
        has warps: many short rows neither leave each block too little to read (a block per
        row) nor read across rows (a thread per row). A DAG output also gets one state per
        `ROWS_PER_WARP` count that divides its rows and leaves `MIN_WARPS_PER_SM` warps per
        SM: each warp sums that many rows at once (`_warp_rows`); and each of those states
        once more with its input read by streaming loads (`stream_reads`, with
        `SketchParams.stream_reads`): the row is read once, so evict-first loads keep it from
        displacing anything in L1 and L2. Empty when the stage does not qualify, or has fewer
        outputs than `MIN_WARPS_PER_SM` per SM."""
        stage = state.stages[i]
        warp = ctx.hardware.warp_size
        space, red = spatial_and_reduce_length(stage)
        if (
            stage.origin != "dag"
            or (consumer is None and not is_output(state, i))
            or needs_multi_level_tiling(state, i)
            or is_column_reduction(stage)
            or space < max(2, self.MIN_WARPS_PER_SM * ctx.hardware.num_sms)
            or red < warp
        ):
            return []
        rows_at = i if consumer is None else consumer
        spatial = [it.name for it in state.stages[rows_at].iters if it.kind == SPATIAL]
        if len(spatial) > 1:
            state = state.fuse(rows_at, spatial)
        row = state.stages[rows_at].iters[0].name
        out = [self._warp_rows(ctx, state, i, fused, rows_at, row, 1)]
        if consumer is None:
            out += [
                self._warp_rows(ctx, state, i, fused, rows_at, row, n)
                for n in self.ROWS_PER_WARP
                if space % n == 0 and space // n >= self.MIN_WARPS_PER_SM * ctx.hardware.num_sms
            ]
            if ctx.params.stream_reads:
                out += [st.pragma(i, 0, "stream_reads", 1) for st in out]
        if consumer is not None:
            out = [st.compute_at(i, consumer, f"{row}_i") for st in out]
        return out

    # the rows one warp of a row sum may read at once, beyond one (`rows_on_warps`)
    ROWS_PER_WARP: ClassVar[tuple[int, ...]] = (2, 4)

    def _warp_rows(
        self, ctx: SketchContext, state: State, i: int, fused: str, rows_at: int, row: str, n: int
    ) -> State:
        """`rows_on_warps`' state with `n` rows per warp: the fused row loop `row` split by an
        unknown warp count bound to threadIdx.y (after `n` rows per warp split off inside it,
        when n > 1), the reduction split [warp, lanes] on threadIdx.x; a warp's n rows loop
        inside its outer reduction loop, so each lane keeps n partial sums and issues the
        loads of its n rows together (n times the bytes in flight of a warp per row, n times
        fewer blocks), then n warp reductions."""
        warp = ctx.hardware.warp_size
        red = spatial_and_reduce_length(state.stages[i])[1]
        warps = row
        if n > 1:
            state = state.split(rows_at, row, [n])
            warps = f"{row}_o"
        state = state.split(rows_at, warps, [None]).bind(rows_at, f"{warps}_i", "threadIdx.y")
        lanes = self.vector_lanes(ctx, state, i)
        if lanes == 1 or red < warp * lanes:
            outer, threads = level_names(fused, 2)
            state = state.split(i, fused, [warp]).bind(i, threads, "threadIdx.x")
            inner = [threads]
        else:
            outer, threads, vector = level_names(fused, 3)
            state = state.split(i, fused, [warp, lanes]).bind(i, threads, "threadIdx.x")
            state = state.vectorize(i, vector)
            inner = [threads, vector]
        if n > 1:
            order = [f"{warps}_o", f"{warps}_i", outer, f"{row}_i", *inner]
            state = state.reorder(i, order)
        return state

    # the most outputs of one reduction a thread keeps in registers along its steps
    MAX_OUTPUTS_INSIDE_STEPS: ClassVar[int] = 4

    @classmethod
    def outputs_inside_steps(cls, state: State, i: int, n_common: int) -> State:
        """Stage i with the spatial iterators its consumer does not share (the moments axis of
        layer_norm(moments=True): the mean of x and of x^2) moved inside its outer reduction
        loop, where they are few (`MAX_OUTPUTS_INSIDE_STEPS` outputs in all): each thread then
        adds every output's term at each step it reads (one pass over the row, one partial
        sum a register per output, a cross-thread sum per output at the end) rather than
        reading its steps once per output."""
        its = state.stages[i].iters
        inner = [it for it in its[n_common:] if it.kind == SPATIAL]
        reduce = [it.name for it in its if it.kind == REDUCE]
        count = 1
        for it in inner:
            count *= it.extent or 0
        if not inner or not reduce or not 1 < count <= cls.MAX_OUTPUTS_INSIDE_STEPS:
            return state
        shared = [it.name for it in its[:n_common]]
        return state.reorder(i, shared + reduce[:1] + [it.name for it in inner] + reduce[1:])

    @classmethod
    def moments_inside_steps(cls, state: State, i: int) -> State:
        """Stage i, computed in no consumer (the partial sums of a layer norm's moments cut
        over blocks), with its trailing axes that no read indexes (`unread_axes`: the
        moments) moved inside its outer reduction loop as `outputs_inside_steps` moves them:
        each block reads its part of a row once for all the moments, not once per moment."""
        stage = state.stages[i]
        unread = {a.name for a in unread_axes(stage)}
        spatial = [it.name for it in stage.iters if it.kind == SPATIAL]
        shared = len(spatial) - len(unread)
        if not unread or set(spatial[shared:]) != unread:
            return state
        return cls.outputs_inside_steps(state, i, shared)

    @staticmethod
    def vector_lanes(ctx: SketchContext, state: State, i: int) -> int:
        """Reduction steps a thread takes at once when it reads them as one vector: as many as
        `SketchParams.max_vector_bytes` holds of the stage's widest input element (1: no
        vector). Where they do not divide the reduction, the guarded steps print as a loop."""
        return vector_lanes(state.stages[i], ctx.params.max_vector_bytes, reads_only=True)

    @staticmethod
    def fusible_consumer(state: State, i: int) -> tuple[int, int] | None:
        """(root consumer, number of shared leading axes) when stage i can be computed inside
        its consumers' root stage: one root that needs no tiling, is computed at root, has no
        reduction and at most one split (a cross-thread one made before)."""
        t = single_consumer_root(state, i)
        if t is None:
            return None
        n_common = common_outer_iters(state, i, t)
        target = state.stages[t]
        if (
            n_common == 0
            or needs_multi_level_tiling(state, t)
            or target.compute_at != ROOT
            or has_reduce_iter(target)
            or len(split_step_ids(state, t)) > 1
        ):
            return None
        return t, n_common

    def thread_splits(
        self, ctx: SketchContext, state: State, i: int, t: int
    ) -> list[tuple[State, int]]:
        """Consumer t's split with a part on threadIdx.x, and its step id: the existing one
        (made for a reduction fused before), or a new split of its last iterator (unknown
        length) and, where the reduction and the consumer both read vectors, a second one
        [threads, lanes] whose lanes are vectorised: the consumer then stores and the
        reduction reads 16 bytes per thread."""
        ids = split_step_ids(state, t)
        if ids:
            return [(state, ids[0])]
        last = state.stages[t].iters[-1].name
        split = len(state.steps)
        out = [(state.split(t, last, [None]).bind(t, last + "_i", "threadIdx.x"), split)]
        consumer_lanes = vector_lanes(state.stages[t], ctx.params.max_vector_bytes)
        lanes = min(self.vector_lanes(ctx, state, i), consumer_lanes)
        if lanes > 1:
            _, threads, vector = level_names(last, 3)
            vec = state.split(t, last, [None, lanes]).bind(t, threads, "threadIdx.x")
            out.append((vec.vectorize(t, vector), split))
        return out


class SplitKReduction(SketchRule):
    """Split-K, for a reduction to tile whose output is too small to occupy the GPU but whose
    reduction is long (a 64x64 matmul over K = 65536): its reduction iterators (fused when
    several) are cut into P parts, and the outer part is factored out (rfactor): a first
    kernel, tiled by the rules that follow like any reduction, computes the P partial sums
    of every output element in a global buffer, with P times the parallelism; a second sums
    them. One sketch per P in `SketchParams.split_k_parts` that leaves every part at least
    `split_k_min_chunk` long. With `SketchParams.split_k_outer_axis`, the outermost reduction
    axis alone is cut where P divides it (a convolution's input channels): the partial-sum
    stage keeps the other reduction axes (the window), so its tiles stay aligned with them and
    its indices free of the divisions by the window a fused axis needs. A Tensor Core product
    (a half-precision matmul or conv) is cut on its K axis (a conv's input channels) where
    whole 16-wide tiles fill each part: its partial sums are then a Tensor Core product too,
    for few output tiles (a batch-1 conv of 7x7 pixels). Where the reduction
    has an element-wise consumer (a conv's bias and relu), the sum of the parts is computed
    inside the consumer's loop, one output element at a time in a register, so the second
    kernel also applies the epilogue and no third kernel or buffer is needed. APPLY: the
    unsplit sketches are made as well."""

    def condition(self, ctx, state, i):
        if (
            not untiled_dag_reduction(state.stages[i])
            or not needs_multi_level_tiling(state, i)
            or not reuses_inputs(state.stages[i])  # CrossBlockReduction's
        ):
            return Cond.SKIP
        return Cond.APPLY if self.parts(ctx, state, i) else Cond.SKIP

    @classmethod
    def parts(cls, ctx, state: State, i: int) -> list[int]:
        """The part counts P of stage i's split-K sketches: those of `split_k_parts` that leave
        every part `split_k_min_chunk` of the reduction, for outputs under
        `split_k_max_outputs`; for a Tensor Core product with up to
        `split_k_tensor_core_output_factor` times more outputs, those whose parts whole 16-wide
        K tiles fill (its blocks hold thousands of outputs each, so that such a product still
        leaves most SMs idle)."""
        params = ctx.params
        space, red = spatial_and_reduce_length(state.stages[i])
        fit = [p for p in params.split_k_parts if red // p >= params.split_k_min_chunk]
        if space < params.split_k_max_outputs or not fit:
            return fit
        if space >= params.split_k_max_outputs * params.split_k_tensor_core_output_factor:
            return []
        k = cls.tensor_core_k(ctx, state, i)
        return [p for p in fit if k is not None and k.extent % (p * MMA) == 0]

    def apply(self, ctx, state, i):
        parts = self.parts(ctx, state, i)
        reduce_iters = [it for it in state.stages[i].iters if it.kind == REDUCE]
        outer = reduce_iters[0]
        whole = self.fused(state, i, [it.name for it in reduce_iters])
        tensor_core_k = self.tensor_core_k(ctx, state, i)
        out = []
        for p in parts:
            outer_only = ctx.params.split_k_outer_axis and outer.extent % p == 0
            cut, name = (state, outer.name) if outer_only else whole
            if tensor_core_k is not None and tensor_core_k.extent % (p * MMA) == 0:
                cut, name = state, tensor_core_k.name
            split = cut.split(i, name, [p], inner_to_outer=False)
            factored = split.rfactor(i, f"{name}_o", 0)  # stage i: the partial sums
            out.append((self.sum_in_consumer(factored, i + 1), i))
        return out

    @staticmethod
    def tensor_core_k(ctx, state: State, i: int):
        """The K axis of stage i's Tensor Core product (direct or implicit GEMM), or None: cut
        where whole 16-wide tiles fill every part, the partial sums are a Tensor Core product
        too (K offset by the part), with the other reduction axes (a conv's window) kept."""
        tf32 = ctx.params.allow_tf32
        found = match_tensor_core(state, i, tf32) or match_implicit_gemm(state, i, tf32)
        if found is None:
            return None
        return next(it for it in state.stages[i].iters if it.name == found.k)

    @staticmethod
    def sum_in_consumer(state: State, final: int) -> State:
        """`state` with stage `final` (the one adding the parts) computed at the innermost loop
        of its element-wise consumer, when it has one computed at root and not tiled; else
        `state` unchanged. The thread binding fuses and splits that loop later, and the attach
        point follows it to the thread's own element."""
        j = elementwise_matched_consumer(state, final)
        if j is None or state.stages[j].compute_at != ROOT or is_tiled(state.stages[j]):
            return state
        return state.compute_at(final, j, state.stages[j].iters[-1].name)

    @staticmethod
    def fused(state, i, names: list[str]) -> tuple[State, str]:
        """The stage's reduction iterators fused into one (unchanged when there is one), and
        the fused iterator's name."""
        if len(names) > 1:
            state = state.fuse(i, names)
        return state, next(it.name for it in state.stages[i].iters if it.kind == REDUCE)
