"""Row padding of the shared-memory caches of multi-level tiled sketches (the float32 kind,
without Tensor Cores): the init rule `SharedPadding`.

A shared cache's rows are its last dimension. Threads of a warp that read one column of several
rows meet banks (row * stride + column) mod 32, in 4-byte words: with a row stride that is a
multiple of 8 words at most 4 rows start on distinct banks, and with a multiple of 32 every row
starts on the same one. `SharedPadding` draws, per cache and with probability
`SketchParams.shared_padding_probability`, a padding of its rows from `PAD_WEIGHTS`, recorded as
storage_align(next-to-last axis, 2 * pad, pad) in elements (lowering: autosched/lower/storage.py):

  16 bytes  a stride of 8k + 4 words: 8 consecutive rows start in 8 distinct groups of 4 banks,
            and every row stays 16-byte aligned, so the cooperative fetch's vectors (16 bytes at
            most) stay aligned: codegen/lanes.py proves a vector access of a padded tile only
            when the row stride is a multiple of the vector's width
  4 bytes   a stride of an odd number of words: 32 consecutive rows start on 32 distinct
            banks, but rows are only 4-byte aligned, so only where the fetch's vectors are 4
            bytes at most (a wider vector would be printed as scalar copies)

A padding is drawn only for rows that are a multiple of 2 * pad elements, where the padded
stride is the row plus pad; for any other row storage_align's next stride of that form changes
nothing or spreads the rows less than they already are (rows of 6 floats to a stride of 12).
The row is the span of the last dimension that the block's tile reads (the plan's `Footprint`),
and a tiled stage's padded caches stay within the shared memory FillTileSize fitted its tiles
in (`max_shared_memory_per_block`): a pad that would not fit is not drawn.
Left alone: 1-d caches (no rows), caches without an affine footprint, caches that have a
storage_align already (the Tensor Core rule pads its operand tiles itself) and caches whose
axes the sketch already split or fused. A tile-size mutation keeps the step: where it changes
the row, storage_align pads to the next stride of its form, and where it widens the fetch's
vectors past a 4-byte pad, they are copied as scalars; both still compute the same.

storage_align must name one of the cache op's axes, which ThreadBind's cooperative fetch fuses,
so the rule inserts its steps right after the sketch's and replays the state; the plan's step
ids, all within the sketch, stay valid. It runs after ThreadBind, whose fetch vectors decide
which paddings keep the vectors aligned, and before DoubleBuffer and AutoUnroll, which neither
read nor change the padding (lowering pads both slots of a double-buffered cache alike): the
replay has fewer steps to redo.
"""

from __future__ import annotations

import math
import random

from autosched.schedule.loop_state import State
from autosched.schedule.steps import StorageAlignStep, replay
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitContext, InitRule
from autosched.sketch.plan import Footprint, SketchPlan, TileGroup
from autosched.sketch.stage_steps import fetch_vector, split_at

# bytes added to each shared row -> weight of the draw (see the module docstring): 16 bytes keep
# every vector and wide shared load aligned, so they are the likelier; storage_align's factor
# is twice the pad
PAD_WEIGHTS = {16: 3, 4: 1}


def block_tile(state: State, g: TileGroup) -> list[int]:
    """The tiled stage's tile per root axis (spatial, then reduction) in the loop its shared
    caches are computed at, as `Footprint` indexes them: the block's spatial tiles and the
    inner reduction tile."""
    return [math.prod(split_at(state.steps, k).lengths) for k in g.spatial_ids + g.reduce_ids]


def row_length(fp: Footprint, tile: list[int]) -> int:
    """Elements of the cache's last dimension that a tile reads (its widest read's span)."""
    return fp.extents(tile)[-1]


def pad_options(row: int, nbytes: int, vector: int) -> dict[int, int]:
    """Pads in elements -> weight for rows of `row` elements of `nbytes` bytes, fetched in
    vectors of `vector` elements: the `PAD_WEIGHTS` whose pads are whole vectors and whose
    storage_align factor (2 * pad) divides the row."""
    out = {}
    for pad_bytes, weight in PAD_WEIGHTS.items():
        if pad_bytes % (nbytes * vector) == 0 and row % (2 * pad_bytes // nbytes) == 0:
            out[pad_bytes // nbytes] = weight
    return out


class SharedPadding(InitRule):
    """Draws a row padding for each shared cache of a multi-level tiled stage (see the module
    docstring), inserted after the sketch's steps. The padded caches of a tiled stage stay
    within the shared memory FillTileSize fitted their tiles in (a padding that would not fit
    is not drawn)."""

    def draw(
        self,
        ctx: InitContext,
        plan: SketchPlan,
        state: State,
        fp: Footprint,
        tile: list[int],
        room: int,
        rng: random.Random,
    ) -> tuple[StorageAlignStep, int] | None:
        """A padding of cache `fp.cache` and the shared bytes it adds, or None: left alone, no
        pad fits its rows, its fetch's vectors and `room` (bytes left), or not drawn."""
        c = fp.cache
        stage = state.stages[c]
        axes = [a.name for a in stage.axes]
        names = [it.name for it in plan.sketch.stages[c].iters]
        if len(axes) < 2 or stage.storage_align is not None or axes[-2] not in names:
            return None
        row = row_length(fp, tile)
        column_bytes = fp.bytes(tile) // row  # one element of every row
        options = {
            pad: weight
            for pad, weight in pad_options(row, fp.nbytes, fetch_vector(state, c)).items()
            if pad * column_bytes <= room
        }
        if not options or rng.random() >= ctx.params.shared_padding_probability:
            return None
        pad = pick([p for p, w in options.items() for _ in range(w)], rng)
        return StorageAlignStep(c, names.index(axes[-2]), 2 * pad, pad), pad * column_bytes

    def apply(self, ctx, plan, state: State, rng: random.Random) -> State:
        aligns = []
        for g in plan.groups:
            tile = block_tile(state, g)
            room = ctx.hardware.max_shared_memory_per_block
            room -= sum(fp.bytes(tile) for fp in g.footprints)
            for fp in g.footprints:
                drawn = self.draw(ctx, plan, state, fp, tile, room, rng)
                if drawn is not None:
                    aligns.append(drawn[0])
                    room -= drawn[1]
        if not aligns:
            return state
        at = len(plan.sketch.steps)
        return replay(state.dag, [*state.steps[:at], *aligns, *state.steps[at:]])


__all__ = ["PAD_WEIGHTS", "SharedPadding", "block_tile", "pad_options", "row_length"]
