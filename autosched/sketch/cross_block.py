"""The sketch rule `CrossBlockReduction`: a long reduction with few outputs, not tiled, cut
into parts that many blocks compute (the partial sums), then summed."""

from __future__ import annotations

from typing import ClassVar

from autosched.schedule.loop_state import State
from autosched.schedule.stage import REDUCE
from autosched.sketch.parts_in_consumer import sum_parts_in_consumer_warps
from autosched.sketch.reduction_rules import CrossThreadReduction, SplitKReduction, moments
from autosched.sketch.rule_base import Cond, SketchContext, SketchRule
from autosched.sketch.stage_steps import level_names
from autosched.sketch.utils import (
    direct_producers,
    is_column_reduction,
    reuses_inputs,
    spatial_and_reduce_length,
    untiled_dag_reduction,
)


class CrossBlockReduction(SketchRule):
    """Split-K for the reductions that are not tiled (the cross-thread path): a reduction
    whose outputs are too few to occupy the GPU (the sum or 2-norm of a whole matrix, a few
    long rows, the columns of a tall matrix) is cut into P parts and the parts factored out
    (rfactor). The partial-sum stage, P times as parallel, is then left to the rules that
    follow: a cross-thread reduction with one block per (part, output) where the reduction
    runs along memory (rows), or one thread per (part, output), reading across the threads,
    where it does not (columns); the final stage, which sums the P parts, is itself drawn as
    a small cross-thread reduction or a loop. P comes from the output count against the SM
    count (`SketchParams.cross_block_blocks_per_sm` blocks, or `cross_block_threads_per_sm`
    threads for a column reduction, per SM in all), rounded up to a power of two and kept to
    parts of at least `cross_block_min_chunk` elements.
    The outermost reduction axis alone is cut where P divides it (the parts then stay whole
    rows); else the reduction axes are fused and cut. Where the parts' sum has an element-wise
    consumer along rows (RMSNorm of a few long rows), a second sketch sums the parts inside
    that consumer, a warp per chunk of a row (parts_in_consumer.py): two kernels, not three.
    A row reduction that is no normalisation's statistics also gets the parts interleaved
    (`interleaved`): the grid-stride order of a hand-written sum, each block reading one chunk
    of every round of P chunks.
    APPLY: the unsplit sketches are made as well, but for a long reduction of a handful of
    outputs (`cut_only`)."""

    MIN_PARTS: ClassVar[int] = 4

    def condition(self, ctx, state, i):
        stage = state.stages[i]
        if (
            not untiled_dag_reduction(stage)
            or reuses_inputs(stage)
            or any(state.stages[p].origin == "rfactor" for p in direct_producers(state, i))
        ):
            return Cond.SKIP
        if not self.parts(ctx, stage, self.row_blocks(ctx, state, i)):
            return Cond.SKIP
        return Cond.APPLY_AND_SKIP_REST if self.cut_only(ctx, state, i) else Cond.APPLY

    # an uncut row reduction of at most num_sms // this outputs runs on at most an eighth of
    # the SMs, a block each (`cut_only`)
    UNCUT_SM_SHARE: ClassVar[int] = 8

    def cut_only(self, ctx: SketchContext, state: State, i: int) -> bool:
        """Whether stage i gets its cut sketches alone: a row reduction, no normalisation's
        statistics, with at most `num_sms // UNCUT_SM_SHARE` outputs that each read at least
        `SketchParams.cross_block_cut_only_bytes`. Uncut, such a reduction streams all its
        input through a block per output, an SM's loads in flight per output: a whole 64 MB
        matrix through one block, an order of magnitude slower than its parts over the GPU,
        states a search would measure for nothing. A normalisation keeps its uncut sketches
        (its rows split over clusters, row_cluster.py, are cut another way)."""
        stage = state.stages[i]
        least = ctx.params.cross_block_cut_only_bytes
        if not least or is_column_reduction(stage) or self.row_blocks(ctx, state, i) is not None:
            return False
        space, red = spatial_and_reduce_length(stage)
        _, element = self.read_vector(ctx, state, i)
        outputs = space // moments(stage)
        return outputs <= ctx.hardware.num_sms // self.UNCUT_SM_SHARE and red * element >= least

    def parts(self, ctx: SketchContext, stage, per_sm: int | None = None) -> int:
        """P for this stage, 0 when it has outputs enough (at least a quarter of the blocks or
        threads wanted: fewer parts would not pay for the second kernel and the sketches they
        add) or a reduction too short to cut in `MIN_PARTS`. Outputs are counted per row (a
        layer norm's two moments of a row are one row); `per_sm`, where given, is the blocks
        per SM wanted instead of the stage's default."""
        space, red = spatial_and_reduce_length(stage)
        space //= moments(stage)
        p = ctx.params
        column = is_column_reduction(stage)
        if per_sm is None:
            per_sm = p.cross_block_threads_per_sm if column else p.cross_block_blocks_per_sm
        wanted = -(-ctx.hardware.num_sms * per_sm // space)
        most = red // p.cross_block_min_chunk
        if wanted < self.MIN_PARTS or most < self.MIN_PARTS:
            return 0
        return min(1 << (wanted - 1).bit_length(), 1 << (most.bit_length() - 1))

    @staticmethod
    def row_blocks(ctx: SketchContext, state: State, i: int) -> int | None:
        """`SketchParams.cross_block_norm_blocks_per_sm` for a normalisation's statistics
        (stage i a reduction along memory whose element-wise consumer reads it back along its
        rows: RMSNorm, a layer norm's moments), whose parts' sum the consumer adds
        (parts_in_consumer.py); None for the others, which keep the stage's default."""
        target = CrossThreadReduction.fusible_consumer(state, i)
        if target is None or is_column_reduction(state.stages[i]):
            return None
        t, n_common = target
        return (
            ctx.params.cross_block_norm_blocks_per_sm
            if len(state.stages[t].iters) == n_common + 1
            else None
        )

    def apply(self, ctx, state, i):
        p = self.parts(ctx, state.stages[i], self.row_blocks(ctx, state, i))
        reduce_iters = [it for it in state.stages[i].iters if it.kind == REDUCE]
        outer = reduce_iters[0]
        if outer.extent % p == 0:
            cut, name = state, outer.name
        else:
            cut, name = SplitKReduction.fused(state, i, [it.name for it in reduce_iters])
        split = cut.split(i, name, [p], inner_to_outer=False)
        factored = split.rfactor(i, f"{name}_o", 0)  # stage i: the partial sums
        ordered = self.memory_order(factored, i, f"{name}_i")
        out = [(ordered, i + 1)]
        grid_stride = self.interleaved(ctx, state, i, p)
        if grid_stride is not None:
            out.append((grid_stride, i + 1))
        if ctx.params.cross_block_parts_in_consumer:
            warp, vector = ctx.hardware.warp_size, ctx.params.max_vector_bytes
            placed = sum_parts_in_consumer_warps(ordered, i + 1, warp, vector)
            if placed is not None:
                out.append((placed, i))  # the parts' sum placed: on to the partial sums
        return out

    # an interleaved sketch only where each part takes at least this many chunks
    MIN_ROUNDS: ClassVar[int] = 2

    @staticmethod
    def read_vector(ctx: SketchContext, state: State, i: int) -> tuple[int, int]:
        """(lanes, bytes of an element) of stage i's reads as one vector
        (`CrossThreadReduction.vector_lanes`)."""
        lanes = CrossThreadReduction.vector_lanes(ctx, state, i)
        return lanes, max(1, ctx.params.max_vector_bytes // lanes)

    def interleaved(self, ctx: SketchContext, state: State, i: int, p: int) -> State | None:
        """Stage i's reduction cut into P parts interleaved rather than contiguous: its
        reduction axes fused and split [rounds, P, chunk], the P part factored out (rfactor),
        so that part b reads chunks b, b + P, b + 2P, ... (`cross_block_interleave_bytes`
        each, whole 16-byte vectors): the grid-stride loop of a hand-written sum, the blocks
        sweeping memory together. The partial sums then reduce [rounds, chunk], in memory
        order. None for a column reduction (its steps are not consecutive in memory), a
        normalisation's statistics and moments (their consumers sum contiguous parts,
        parts_in_consumer.py), and where P chunks do not divide the reduction at least
        `MIN_ROUNDS` times: a remainder would guard every step, and a guarded load is a branch
        that keeps the next load from issuing before it."""
        stage = state.stages[i]
        chunk_bytes = ctx.params.cross_block_interleave_bytes
        lanes, element = self.read_vector(ctx, state, i)
        chunk = chunk_bytes // element
        red = spatial_and_reduce_length(stage)[1]
        if (
            chunk < lanes
            or chunk % lanes
            or is_column_reduction(stage)
            or self.row_blocks(ctx, state, i) is not None
            or moments(stage) > 1
            or red % (p * chunk)
            or red // (p * chunk) < self.MIN_ROUNDS
        ):
            return None
        reduce_iters = [it.name for it in stage.iters if it.kind == REDUCE]
        cut, name = SplitKReduction.fused(state, i, reduce_iters)
        _, part, _ = level_names(name, 3)
        return cut.split(i, name, [p, chunk]).rfactor(i, part, 0)

    @staticmethod
    def memory_order(state: State, rf: int, rest: str) -> State:
        """The partial sums' reduction loops in the reduction's own order: rfactor puts the
        rest of the cut axis (`rest`) after the axes it left whole, which would make a fused
        loop over them step across rows."""
        its = state.stages[rf].iters
        reduce = [it.name for it in its if it.kind == REDUCE]
        if len(reduce) < 2 or reduce[-1] != rest:
            return state
        spatial = [it.name for it in its if it.kind != REDUCE]
        return state.reorder(rf, spatial + [rest] + reduce[:-1])
