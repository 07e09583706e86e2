"""The parts of a cross-block reduction summed where an element-wise consumer reads them, for
the sketch rule `cross_block.CrossBlockReduction`.

A few long rows normalised (RMSNorm of 16 rows of 262,144) cut each row's sum into P parts:
one kernel computes the P partial sums of every row with many blocks, and the sum of the parts
is needed by every element of the row's consumer. Left as a kernel of its own (one thread per
row), that sum costs a third launch between the two passes over the rows; computed per element
inside the consumer, P loads per element. Here instead the consumer's row axis is cut into
chunks of one block each, [chunks, warps, steps, 32 lanes, vector]: each of the block's warps
(threadIdx.y) first sums the P parts of its row (a part per lane, a warp reduction by
shuffles), and then each lane writes one 16-byte vector per step. The parts are read once per
warp of a chunk, the row's elements in 16-byte vectors, and the whole row normalisation is two
kernels. The warps per block and steps per warp are the init rules' decisions (unknown
splits): more steps read the parts fewer times, fewer give more blocks; more warps per block
let an SM hold more of the rows' bytes in flight than one-warp blocks can (an SM holds at most
32 blocks, so one-warp blocks fill half its threads), and AutoUnroll draws the consumer's
unrolling (`sums_parts_inside`) so that a warp's steps are loads issued together.
"""

from __future__ import annotations

from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, REDUCE, ROOT, Stage
from autosched.sketch.stage_steps import level_names, split_step_ids
from autosched.sketch.utils import (
    common_outer_iters,
    direct_producers,
    has_reduce_iter,
    needs_multi_level_tiling,
    single_consumer_root,
    vector_lanes,
)


def sum_parts_in_consumer_warps(
    state: State, final: int, warp: int, max_vector_bytes: int
) -> State | None:
    """`state` with stage `final` (the sum of a cross-block reduction's parts) computed at the
    chunk loop of its element-wise consumer, whose last axis is split [chunks, warps (unknown,
    on threadIdx.y), steps (unknown), warp lanes on threadIdx.x, vector], the parts on the same
    lanes; None when the consumer is not one root stage computed at root, untiled, unsplit,
    without reduction, sharing all of `final`'s axes and one more (the row) that whole warps of
    vectors fill at least twice."""
    t = single_consumer_root(state, final)
    if t is None:
        return None
    consumer = state.stages[t]
    n_common = common_outer_iters(state, final, t)
    if (
        n_common == 0
        or not few_outputs_per_row(state.stages[final], n_common)
        or len(consumer.iters) != n_common + 1
        or consumer.compute_at != ROOT
        or needs_multi_level_tiling(state, t)
        or has_reduce_iter(consumer)
        or split_step_ids(state, t)
    ):
        return None
    row = consumer.iters[-1]
    length = row.extent or 0  # unknown (None) only after a split, which the consumer has not
    lanes = vector_lanes(consumer, max_vector_bytes)
    if length % (warp * lanes):
        lanes = 1
    if length % (warp * lanes) or length // (warp * lanes) < 2:
        return None
    if lanes > 1:
        outer, threads, vector = level_names(row.name, 3)
        state = state.split(t, row.name, [warp, lanes]).bind(t, threads, "threadIdx.x")
        state = state.vectorize(t, vector)
    else:
        outer, threads = level_names(row.name, 2)
        state = state.split(t, row.name, [warp]).bind(t, threads, "threadIdx.x")
    chunks, warps, _ = level_names(outer, 3)
    state = state.split(t, outer, [None, None]).bind(t, warps, "threadIdx.y")
    parts = next(it.name for it in state.stages[final].iters if it.kind == REDUCE)
    state = state.split(final, parts, [warp]).bind(final, f"{parts}_i", "threadIdx.x")
    return state.compute_at(final, t, chunks)


# the most outputs of a row the parts' sum may keep beside each other (a layer norm's mean of x
# and of x^2: 2), each summed over the parts by the same lanes
MAX_OUTPUTS_PER_ROW = 4


def few_outputs_per_row(final: Stage, n_common: int) -> bool:
    """Does the parts' sum have, past the `n_common` axes it shares with its consumer, only
    spatial axes of at most `MAX_OUTPUTS_PER_ROW` outputs in all (none: an RMSNorm's mean
    square; 2: a layer norm's two moments)?"""
    count = 1
    for axis in final.axes[n_common:]:
        count *= axis.extent
    return n_common <= len(final.axes) and count <= MAX_OUTPUTS_PER_ROW


def sums_parts_inside(state: State, i: int) -> bool:
    """Is stage i a root stage inside which the sum of a cross-block reduction's parts is
    computed by its threads (an attached stage reads a partial-sum stage and reduces it on
    threadIdx.x), as `sum_parts_in_consumer_warps` places it, or as CrossThreadReduction does
    at a whole row? Split-K's epilogue, which adds the parts one element at a time in a loop,
    is not."""
    stage = state.stages[i]
    if stage.compute_at != ROOT or has_reduce_iter(stage):
        return False
    return any(
        other.compute_at == ATTACHED
        and other.attach is not None
        and other.attach[0] == i
        and any(state.stages[p].origin == "rfactor" for p in direct_producers(state, j))
        and any(it.kind == REDUCE and it.annotation == "threadIdx.x" for it in other.iters)
        for j, other in enumerate(state.stages)
    )


__all__ = ["sum_parts_in_consumer_warps", "sums_parts_inside"]
