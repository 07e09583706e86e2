"""The `TensorCoreInstruction` init rule: which instruction family each Tensor Core stage of a
state becomes, drawn uniformly from `SketchParams.tensor_core_instructions` among those that
fit the stage (an implicit GEMM conv of `SketchParams.wgmma_conv_macs_per_sm` or more on
sm_90: wgmma wherever it fits, `hopper_sized`): "wmma" (nvcuda::wmma fragments), "mma"
(`ldmatrix` + `mma.sync` m16n8k16 on per-lane registers, m16n8k8 for TF32;
docs/TENSOR_CORES.md) and "wgmma" (Hopper's warpgroup MMA, `lower/warpgroup_mma.py`).

"wgmma" fits where the target is sm_90, the operands are 16-bit and some block tile can be
computed by warpgroups (`wgmma_fits`): rows a multiple of 64 (4 warps of 16 rows each per
warpgroup), at most 256 columns, and a warp's accumulators (a 16-row strip of the whole block
width) within the registers its block size leaves. Drawing it tiles the stage afresh for
warpgroups, all warps along M with one 16-row tile each, the block tile and K chunk weighted
toward Hopper's fast shapes and the shared tiles pipelined (`draw_warpgroup_tile`,
warpgroup_tile.py): what `warpgroup_mma` lowers. With `SketchParams.redraw_wgmma_tiles` off,
wgmma fits only where the drawn block tile is warpgroup-shaped (`warpgroup_tiles`) and drawing
it re-tiles that tile's warps (`as_warpgroups`; the block tile, shared tiles and fetch stay as
drawn). Where no block tile of whole warpgroups divides M (`warpgroup_divisible`) and an
epilogue writes the output, the block rows are rounded up to whole warpgroups instead (the
shared tiles grow with them).

Only a choice other than wmma is recorded (`State.tensor_core_instruction`); a state that keeps
wmma has the same steps as before the rule existed, and where only wmma and mma are listed the
draws are those of the rule before wgmma existed. The rule runs after the rules whose draws it
must not change, so their draws are those they would be without it.
"""

from __future__ import annotations

import math

from autosched.lower import ir
from autosched.lower import wgmma_layout as wl
from autosched.schedule.steps import SplitStep, replay
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.stage_steps import split_at
from autosched.sketch.tensor_core_init import (
    MAX_BLOCK_TILES,
    REGISTERS_PER_TILE,
    fragment_register_budget,
)
from autosched.sketch.validity import Reason, Rejected, tile_sizes
from autosched.sketch.warpgroup_tile import (
    draw_warpgroup_tile,
    rounded_to_warpgroups,
    warpgroup_divisible,
    warpgroup_shapes,
)
from autosched.te.tensor import ComputeOp

WMMA, MMA, WGMMA = "wmma", "mma", "wgmma"
WGMMA_ARCHS = ("sm_90",)


def warpgroup_tiles(ctx, state, g) -> tuple[int, int] | None:
    """The (warps, column tiles) of Tensor Core group `g`'s block tile computed by warpgroups:
    one warp per 16-row tile, each over all the block's 16-column tiles; None where that does
    not fit (see the module docstring)."""
    (wm, rm, _), (wn, rn, _) = (split_at(state.steps, k).lengths for k in g.split_ids[:2])
    warps, cols = wm * rm, wn * rn
    if g.epilogue and warps % wl.WARPGROUP_WARPS and not warpgroup_divisible(g.tiles[0]):
        warps = rounded_to_warpgroups(warps, g.tiles[0])
    hw = ctx.hardware
    threads = warps * hw.warp_size
    fits = (
        hw.arch in WGMMA_ARCHS
        and g.operand_bytes == 2
        and g.k_tile == ir.WMMA_TILE
        and warps % wl.WARPGROUP_WARPS == 0
        and warps <= MAX_BLOCK_TILES
        and cols * ir.WMMA_TILE <= wl.N_MAX
        and threads <= hw.max_threads_per_block
        and cols * REGISTERS_PER_TILE <= fragment_register_budget(hw, threads)
    )
    return (warps, cols) if fits else None


def as_warpgroups(state, g, warps: int, cols: int):
    """`state` with group `g`'s M split [warps, 1, 16] and N split [1, cols, 16]."""
    steps = list(state.steps)
    shapes = ((warps, 1, ir.WMMA_TILE), (1, cols, ir.WMMA_TILE))
    for k, lengths in zip(g.split_ids[:2], shapes, strict=True):
        s = steps[k]
        steps[k] = SplitStep(s.stage_id, s.iter_id, s.extent, lengths, s.inner_to_outer)
    return replay(state.dag, steps)


def hopper_sized(ctx, state, g) -> bool:
    """Whether group `g` is an implicit GEMM conv's (it gathers its pixels) of at least
    `SketchParams.wgmma_conv_macs_per_sm` multiply-adds per SM on sm_90: it is then drawn as
    wgmma wherever wgmma fits (and its epilogue in vectors, epilogue_vector.py) rather than
    uniformly."""
    limit, hw = ctx.params.wgmma_conv_macs_per_sm, ctx.hardware
    op = state.stages[g.acc].op
    if not limit or hw.arch not in WGMMA_ARCHS or not any(g.gathers):
        return False
    if not isinstance(op, ComputeOp):
        return False
    extents = [a.extent for a in (*op.axis, *op.reduce_axis)]
    return all(isinstance(e, int) for e in extents) and math.prod(extents) >= limit * hw.num_sms


def wgmma_fits(ctx, g) -> bool:
    """Whether group `g` may be drawn as wgmma: on sm_90, 16-bit operands, and a block tile
    that warpgroups compute (any of `warpgroup_shapes`, as the tile is drawn afresh; the drawn
    one, `warpgroup_tiles`, with `redraw_wgmma_tiles` off)."""
    hw = ctx.hardware
    if hw.arch not in WGMMA_ARCHS or g.operand_bytes != 2 or g.k_tile != ir.WMMA_TILE:
        return False
    return bool(warpgroup_shapes(ctx, g))


class TensorCoreInstruction(InitRule):
    """Draws the instruction family of every Tensor Core stage of the state; a stage drawn as
    wgmma is tiled by `draw_warpgroup_tile` (or, with `redraw_wgmma_tiles` off, its drawn block
    tile by `as_warpgroups`)."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.tensor_core_instructions
        redraw = ctx.params.redraw_wgmma_tiles
        for g in plan.tensor_core:
            shape = None
            if WGMMA in choices:
                shape = warpgroup_tiles(ctx, state, g) if not redraw else wgmma_fits(ctx, g)
            fits = [c for c in choices if c != WGMMA or shape]
            if fits == [WMMA] or not fits:
                continue
            drawn = WGMMA if WGMMA in fits and hopper_sized(ctx, state, g) else pick(fits, rng)
            if drawn == WGMMA and redraw:
                tiled = draw_warpgroup_tile(ctx, state, g, rng)
                if tiled is None:
                    raise Rejected(tile_sizes(Reason.SHARED_MEMORY))
                state = tiled
            elif drawn == WGMMA and isinstance(shape, tuple):
                state = as_warpgroups(state, g, *shape)
            if drawn != WMMA:
                state = state.tensor_core_instruction(g.acc, drawn)
        return state


__all__ = [
    "TensorCoreInstruction",
    "hopper_sized",
    "as_warpgroups",
    "rounded_to_warpgroups",  # warpgroup_tile.py
    "warpgroup_divisible",
    "warpgroup_tiles",
    "wgmma_fits",
]
