"""The tiles of a Tensor Core stage drawn as wgmma (sm_90): `draw_warpgroup_tile`, which the
`TensorCoreInstruction` rule calls once it has drawn "wgmma" for a group.

FillTensorCore draws block tiles for wmma and mma warps, whose 16 x 16 tiles per warp make a
block of two warpgroups over 256 columns (the fastest Hopper tile) one draw in a hundred. A
wgmma stage is tiled differently anyway (a warp per 16-row tile, across the block's whole
width: `as_warpgroups`), so the rule draws its block tile afresh, from the shapes warpgroups can
compute, weighted by `SketchParams`:

  warpgroups  along M, by `wgmma_warpgroup_weights` (1, 2 or 4; 2 the likeliest)
  width       the block's columns, wgmma's N: c 16-column tiles weighted c ** `wgmma_width_exponent`
              (wider tiles read each fetched byte more often; 1: in proportion to N)
  filling     where some tile's blocks fill the SMs, one whose blocks are fewer weighted by the
              share it fills (a 1024^3 product's 128 x 256 blocks fill a quarter of an H100's
              132 SMs); a product too small for any tile to fill them is weighted as above
  K chunk     16-wide K steps per shared tile; a chunk of whole 128-byte rows (64 halves, the
              128B swizzle's row and TMA's box line) weighted `wgmma_swizzled_chunk_weight`
  pipeline    where the product's K spans more than one chunk, its shared operands are
              double-buffered (the pipeline PipelineStages deepens and OperandCopy may feed by
              TMA) with chance `wgmma_pipeline_probability`, if DoubleBuffer did not already

A shape must fit `shape_fits` (the checks `warpgroup_tiles` makes of a drawn tile: rows of
whole warpgroups that divide M, or rounded up past it under an epilogue; at most 256 columns;
the accumulators' share of the registers) and, with its slots, the opt-in shared memory; a
draw that does not is drawn again (`tile_retries`), then the state is rejected. The row
padding and fetch vectors stay as drawn. Everything drawn is recorded as the other rules'
records are (split lengths; a double-buffer record where DoubleBuffer writes its own), so a
state tiled here replays, mutates and is looked up like any other. `redraw_wgmma_tiles=False`
keeps the drawn block tile, as before this rule.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from autosched.lower import ir
from autosched.lower import wgmma_layout as wl
from autosched.schedule.loop_state import State
from autosched.schedule.steps import DoubleBufferStep, PragmaStep, replay
from autosched.sketch.factorization import divisors
from autosched.sketch.stage_steps import split_at
from autosched.sketch.tensor_core_init import (
    MAX_BLOCK_TILES,
    MAX_CHUNK,
    REGISTERS_PER_TILE,
    TensorCoreDraw,
    fragment_register_budget,
)
from autosched.sketch.tensor_core_plan import TensorCoreGroup
from autosched.te.tensor import ComputeOp
from measure.hardware import HardwareParams

SWIZZLE_ROW_BYTES = 128  # wgmma's 128B swizzle: a K chunk of whole rows is a multiple of this
# a block tile rounded up to whole warpgroups: the rows its blocks cover past M, at most this
# share of M's rows
MAX_ROWS_PAST_M = (1, 4)


@dataclass(frozen=True)
class WarpgroupTile:
    """A wgmma block tile: `warps` 16-row tiles along M (a warp each, 4 per warpgroup), `cols`
    16-column tiles along N (wgmma's N / 16), `chunk` 16-wide K steps per shared tile."""

    warps: int
    cols: int
    chunk: int

    def lengths(self, k_tile: int) -> tuple[tuple[int, ...], ...]:
        """The M, N and K splits' lengths (`as_warpgroups`'s form)."""
        return ((self.warps, 1, ir.WMMA_TILE), (1, self.cols, ir.WMMA_TILE), (self.chunk, k_tile))

    def draw(self, pads: tuple[int, ...], k_tile: int) -> TensorCoreDraw:
        """The tile as FillTensorCore's draw (for its shared memory estimate)."""
        return TensorCoreDraw((self.warps, 1), (1, self.cols), self.chunk, pads, k_tile)


def warpgroup_divisible(m_tiles: int) -> bool:
    """Whether some block tile of whole warpgroups (a multiple of 4 16-row tiles, at most
    `MAX_BLOCK_TILES`) divides M's `m_tiles` tiles. Where none does (M of 49 or 98 tiles: the
    pixels of convs of 28x28 or 7x7 outputs), a drawn block tile is rounded up to whole
    warpgroups instead, its last block running past M: wgmmas run whole tiles past the
    tensor's edge, and the epilogue (`g.epilogue`: the output written by the kernel's root,
    element by element under its guards) stores none of those rows."""
    return any(d % wl.WARPGROUP_WARPS == 0 for d in divisors(m_tiles) if d <= MAX_BLOCK_TILES)


def _covers_little_past(warps: int, m_tiles: int) -> bool:
    """Whether blocks of `warps` 16-row tiles cover at most `MAX_ROWS_PAST_M` more than M."""
    covered = -(-m_tiles // warps) * warps
    numerator, denominator = MAX_ROWS_PAST_M
    return (covered - m_tiles) * denominator <= m_tiles * numerator


def rounded_to_warpgroups(warps: int, m_tiles: int) -> int:
    """`warps` 16-row tiles of a block rounded up to whole warpgroups, where the blocks then
    cover at most a quarter more than M's `m_tiles` tiles (`MAX_ROWS_PAST_M`); else `warps`
    (not warpgroup-shaped: no wgmma). Small M (2 or 3 tiles) would waste half its work."""
    rounded = warps + -warps % wl.WARPGROUP_WARPS
    return rounded if _covers_little_past(rounded, m_tiles) else warps


def _rows_fit(warps: int, g: TensorCoreGroup) -> bool:
    """Whether `warps` 16-row tiles make a block tile of M: dividing its tiles, or (under an
    epilogue, where no warpgroup tile divides M) rounded past it within `MAX_ROWS_PAST_M`; and
    every warp starting on rows that hold elements."""
    m, held = g.tiles[0], g.held[0]
    if held and warps > held:
        return False
    if m % warps == 0:
        return True
    return g.epilogue and not warpgroup_divisible(m) and _covers_little_past(warps, m)


def shape_fits(hw: HardwareParams, g: TensorCoreGroup, warps: int, cols: int) -> bool:
    """Whether warpgroups compute a block tile of `warps` 16-row and `cols` 16-column tiles of
    group `g`: whole warpgroups whose rows fit M (`_rows_fit`), columns dividing N's tiles up
    to wgmma's widest N, threads within the block limit and the accumulators (a 16-row strip
    of the block's width per warp) within their share of a thread's registers."""
    threads = warps * hw.warp_size
    return (
        warps % wl.WARPGROUP_WARPS == 0
        and warps <= MAX_BLOCK_TILES
        and threads <= hw.max_threads_per_block
        and _rows_fit(warps, g)
        and g.tiles[1] % cols == 0
        and cols * ir.WMMA_TILE <= wl.N_MAX
        and cols * REGISTERS_PER_TILE <= fragment_register_budget(hw, threads)
    )


def warpgroup_shapes(ctx, g: TensorCoreGroup, outputs: int = 0) -> dict[tuple[int, int], float]:
    """(warps, cols) -> weight of every block tile warpgroups can compute for group `g`
    (`shape_fits`; weights: see the module docstring); empty where none fits. Where some tile's
    blocks fill the SMs (`outputs`: the product's output elements; 0: unknown), a tile whose
    blocks are fewer weighs the share of the SMs they fill more."""
    params, sms = ctx.params, ctx.hardware.num_sms
    shapes, blocks = {}, {}
    for warpgroups, weight in params.wgmma_warpgroup_weights:
        warps = warpgroups * wl.WARPGROUP_WARPS
        for cols in divisors(g.tiles[1]):
            if shape_fits(ctx.hardware, g, warps, cols):
                shapes[(warps, cols)] = weight * cols**params.wgmma_width_exponent
                blocks[(warps, cols)] = -(-outputs // (warps * cols * ir.WMMA_TILE**2))
    if outputs and max(blocks.values(), default=0) >= sms:
        shapes = {s: w * min(1.0, blocks[s] / sms) for s, w in shapes.items()}
    return shapes


def chunk_weights(ctx, g: TensorCoreGroup) -> dict[int, float]:
    """K chunk -> weight: the chunks of whole 128-byte rows `wgmma_swizzled_chunk_weight`, the
    others 1."""
    row = ctx.params.wgmma_swizzled_chunk_weight
    return {
        c: row if c * g.k_tile * g.operand_bytes % SWIZZLE_ROW_BYTES == 0 else 1
        for c in divisors(g.tiles[2])
        if c <= MAX_CHUNK
    }


def _weighted(weights: dict, rng: random.Random):
    """A key of `weights`, drawn in proportion to its value."""
    keys = list(weights)
    return rng.choices(keys, [weights[k] for k in keys])[0]


def _row_pads(state: State, g: TensorCoreGroup) -> tuple[int, ...]:
    aligns = (state.stages[c].storage_align for c in g.shared)
    return tuple(0 if a is None else a[2] for a in aligns)


def _with_double_buffers(steps: list, stages: tuple[int, ...]) -> list:
    """`steps` with double-buffer records of `stages` where the DoubleBuffer rule writes them:
    among its own records in stage order, else before AutoUnroll's first pragma (else last)."""
    kept = [s for s in steps if not isinstance(s, DoubleBufferStep)]
    first = next((k for k, s in enumerate(steps) if isinstance(s, DoubleBufferStep)), None)
    if first is None:
        first = next(
            (
                k
                for k, s in enumerate(steps)
                if isinstance(s, PragmaStep) and s.pragma_type.startswith("auto_unroll_max_step")
            ),
            len(steps),
        )
    ids = sorted({s.stage_id for s in steps if isinstance(s, DoubleBufferStep)} | set(stages))
    return kept[:first] + [DoubleBufferStep(i) for i in ids] + kept[first:]


def draw_warpgroup_tile(ctx, state: State, g: TensorCoreGroup, rng: random.Random) -> State | None:
    """`state` with group `g` tiled by a drawn warpgroup tile and, maybe, pipelined (see the
    module docstring); None where no shape fits within `tile_retries` draws."""
    params = ctx.params
    op = state.stages[g.acc].op
    outputs = math.prod(a.extent for a in op.axis) if isinstance(op, ComputeOp) else 0
    shapes = warpgroup_shapes(ctx, g, outputs)
    chunks = chunk_weights(ctx, g)
    if not shapes or not chunks:
        return None
    buffered = all(state.stages[c].double_buffer for c in g.shared)
    limit = ctx.hardware.max_shared_memory_per_block_optin
    pads = _row_pads(state, g)
    for _ in range(params.tile_retries):
        warps, cols = _weighted(shapes, rng)
        tile = WarpgroupTile(warps, cols, _weighted(chunks, rng))
        pipelined = buffered or (
            g.tiles[2] > tile.chunk and rng.random() < params.wgmma_pipeline_probability
        )
        slots = 2 if pipelined else 1  # double-buffered: two slots
        if tile.draw(pads, g.k_tile).pipelined_bytes(g, slots) <= limit:
            break
    else:
        return None
    steps = list(state.steps)
    for k, lengths in zip(g.split_ids, tile.lengths(g.k_tile), strict=True):
        steps[k] = dataclasses.replace(split_at(steps, k), lengths=lengths)
    if pipelined and not buffered:
        steps = _with_double_buffers(steps, g.shared)
    return replay(state.dag, steps)


__all__ = [
    "WarpgroupTile",
    "chunk_weights",
    "draw_warpgroup_tile",
    "rounded_to_warpgroups",
    "shape_fits",
    "warpgroup_divisible",
    "warpgroup_shapes",
]
