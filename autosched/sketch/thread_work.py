"""How much a thread of a root stage bound by fuse-split-bind (`ThreadBind.bind_simple`: an
element-wise output, a pooling) reads and writes: the draws that give each thread more than one
element or vector of a large stage, and a vector of each window row of a pooling.

- Repeats: the fused loop split [blocks, repeats, threads(, lanes)], the repeats unrolled, so a
  thread handles `repeats` vectors (or elements) a block's width apart: the loads of all of
  them in flight at once and `repeats` times fewer blocks, while each warp's accesses stay
  contiguous (inductor's pointwise kernels take 2 to 8 elements a thread alike). Offered only
  where the stage still gives every SM a full complement of threads with the largest count
  drawn, and where the split divides the loop (no guarded repeats).
- Window vectors: a stage whose innermost loop is a short reduction along memory (the columns
  of a pooling window) may read that loop as one vector (`vectorize`), e.g. both columns of a
  2 x 2 window in one 8-byte load. The printer proves each such access aligned and contiguous
  (codegen/lanes.py) and prints lanes one by one where it cannot, so the draw is always safe.

The draws consume the random stream only where a stage has more than one option, so stages
without one (small ones, those without a window) sample exactly as before.
"""

from __future__ import annotations

import random

from autosched.schedule.loop_state import State
from autosched.schedule.stage import REDUCE
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitContext
from autosched.sketch.utils import is_column_reduction, vector_lanes


def repeat_options(ctx: InitContext, extent: int, threads: int, lanes: int) -> tuple[int, ...]:
    """The repeats (`SketchParams.thread_repeats`) a thread of a `threads`-wide block may take
    of a fused loop of `extent` elements read `lanes` at a time: 1, and each count that divides
    the loop with the block's width and leaves at least `max_threads_per_sm` threads on every
    SM."""
    hw = ctx.hardware
    wanted = hw.num_sms * hw.max_threads_per_sm
    out = [1]
    for r in ctx.params.thread_repeats:
        width = r * threads * lanes
        if r > 1 and extent % width == 0 and extent // (r * lanes) >= wanted:
            out.append(r)
    return tuple(sorted(set(out)))


def split_repeats(
    ctx: InitContext, state: State, i: int, threads: int, lanes: int, rng: random.Random
) -> State:
    """Stage i's fused loop (iterator 0) split [blocks, repeats, threads(, lanes)] with the
    repeats drawn (`repeat_options`; no draw where there is one option) and unrolled, the
    lanes vectorised; blockIdx.x and threadIdx.x bound."""
    extent = state.stages[i].iters[0].extent or 0
    options = repeat_options(ctx, extent, threads, lanes)
    repeats = pick(options, rng) if len(options) > 1 else 1
    lengths = [threads] + ([lanes] if lanes > 1 else [])
    if repeats > 1:
        state = state.split(i, 0, [repeats, *lengths]).unroll(i, 1)
        thread_at = 2
    else:
        state = state.split(i, 0, lengths)
        thread_at = 1
    if lanes > 1:
        state = state.vectorize(i, thread_at + 1)
    return state.bind(i, 0, "blockIdx.x").bind(i, thread_at, "threadIdx.x")


def window_lanes(ctx: InitContext, state: State, i: int) -> int:
    """Lanes of the vector stage i's innermost loop may be read as (1: none): a reduction
    loop that runs along memory (not a column reduction), of at most
    `SketchParams.max_vector_bytes` of the stage's widest input, 2 or 4 long."""
    stage = state.stages[i]
    inner = stage.iters[-1]
    if inner.kind != REDUCE or inner.annotation != "none" or is_column_reduction(stage):
        return 1
    most = vector_lanes(stage, ctx.params.max_vector_bytes, reads_only=True)
    return inner.extent if inner.extent in (2, 4) and inner.extent <= most else 1


def vectorize_window(ctx: InitContext, state: State, i: int, rng: random.Random) -> State:
    """Stage i's innermost reduction loop vectorised, drawn against not, where `window_lanes`
    allows it (no draw elsewhere)."""
    if window_lanes(ctx, state, i) == 1 or not ctx.params.window_vectors:
        return state
    if pick((False, True), rng):
        return state.vectorize(i, len(state.stages[i].iters) - 1)
    return state


__all__ = ["repeat_options", "split_repeats", "vectorize_window", "window_lanes"]
