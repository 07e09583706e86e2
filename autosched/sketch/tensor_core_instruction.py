"""The `TensorCoreInstruction` init rule: which instruction family each Tensor Core stage of a
state becomes, drawn uniformly from `SketchParams.tensor_core_instructions` among those that
fit the stage: "wmma" (nvcuda::wmma fragments), "mma" (`ldmatrix` + `mma.sync` m16n8k16 on
per-lane registers, m16n8k8 for TF32; docs/TENSOR_CORES.md) and "wgmma" (Hopper's warpgroup
MMA, `lower/warpgroup_mma.py`).

"wgmma" fits where the target is sm_90, the operands are 16-bit and the drawn block tile can be
computed by warpgroups (`warpgroup_tiles`): its rows a multiple of 64 (4 warps of 16 rows each
per warpgroup), its columns at most 256, and a warp's accumulators (a 16-row strip of the whole
block width) within the registers its block size leaves. Drawing it re-tiles the block's warps
to that shape, all along M with one 16-row tile each (the block tile, and with it the shared
tiles and their fetch, stay as drawn): what `warpgroup_mma` lowers. Where no block tile of whole
warpgroups divides M (`warpgroup_divisible`) and an epilogue writes the output, the drawn block
rows are rounded up to whole warpgroups instead (the shared tiles grow with them).

Only a choice other than wmma is recorded (`State.tensor_core_instruction`); a state that keeps
wmma has the same steps as before the rule existed, and where only wmma and mma are listed the
draws are those of the rule before wgmma existed. The rule runs after the rules whose draws it
must not change, so their draws are those they would be without it.
"""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower import wgmma_layout as wl
from autosched.schedule.steps import SplitStep, replay
from autosched.sketch.factorization import divisors, pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.stage_steps import split_at
from autosched.sketch.tensor_core_init import (
    MAX_BLOCK_TILES,
    REGISTERS_PER_TILE,
    fragment_register_budget,
)

WMMA, MMA, WGMMA = "wmma", "mma", "wgmma"
WGMMA_ARCHS = ("sm_90",)
# a block tile rounded up to whole warpgroups: the rows its blocks cover past M, at most this
# share of M's rows
MAX_ROWS_PAST_M = (1, 4)


def warpgroup_divisible(m_tiles: int) -> bool:
    """Whether some block tile of whole warpgroups (a multiple of 4 16-row tiles, at most
    `MAX_BLOCK_TILES`) divides M's `m_tiles` tiles. Where none does (M of 49 or 98 tiles: the
    pixels of convs of 28x28 or 7x7 outputs), a drawn block tile is rounded up to whole
    warpgroups instead, its last block running past M: wgmmas run whole tiles past the
    tensor's edge, and the epilogue (`g.epilogue`: the output written by the kernel's root,
    element by element under its guards) stores none of those rows."""
    return any(d % wl.WARPGROUP_WARPS == 0 for d in divisors(m_tiles) if d <= MAX_BLOCK_TILES)


def rounded_to_warpgroups(warps: int, m_tiles: int) -> int:
    """`warps` 16-row tiles of a block rounded up to whole warpgroups, where the blocks then
    cover at most a quarter more than M's `m_tiles` tiles (`MAX_ROWS_PAST_M`); else `warps`
    (not warpgroup-shaped: no wgmma). Small M (2 or 3 tiles) would waste half its work."""
    rounded = warps + -warps % wl.WARPGROUP_WARPS
    covered = -(-m_tiles // rounded) * rounded
    numerator, denominator = MAX_ROWS_PAST_M
    return rounded if (covered - m_tiles) * denominator <= m_tiles * numerator else warps


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


class TensorCoreInstruction(InitRule):
    """Draws the instruction family of every Tensor Core stage of the state."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.tensor_core_instructions
        for g in plan.tensor_core:
            shape = warpgroup_tiles(ctx, state, g) if WGMMA in choices else None
            fits = [c for c in choices if c != WGMMA or shape is not None]
            if fits == [WMMA] or not fits:
                continue
            drawn = pick(fits, rng)
            if drawn == WGMMA and shape is not None:
                state = as_warpgroups(state, g, *shape)
            if drawn != WMMA:
                state = state.tensor_core_instruction(g.acc, drawn)
        return state


__all__ = ["TensorCoreInstruction", "as_warpgroups", "warpgroup_tiles"]
