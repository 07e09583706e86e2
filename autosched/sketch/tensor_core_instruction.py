"""The `TensorCoreInstruction` init rule: which instruction family each Tensor Core stage of a
state becomes, drawn uniformly from `SketchParams.tensor_core_instructions` among those that
fit the stage: "wmma" (nvcuda::wmma fragments), "mma" (`ldmatrix` + `mma.sync` m16n8k16 on
per-lane registers, m16n8k8 for TF32; docs/TENSOR_CORES.md) and "wgmma" (Hopper's warpgroup
MMA, `lower/warpgroup_mma.py`).

"wgmma" fits where the target is sm_90, the operands are 16-bit and the drawn tiles are
warpgroup-shaped (`warpgroup_shaped`): the block's warps all along M, a multiple of 4 of them,
one 16-row tile each (4 consecutive warps: a 64-row slab), and at most 256 columns.

Only a choice other than wmma is recorded (`State.tensor_core_instruction`); a state that keeps
wmma has the same steps as before the rule existed, and where only wmma and mma are listed the
draws are those of the rule before wgmma existed. The rule runs after the rules whose draws it
must not change, so their draws are those they would be without it.
"""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower import wgmma_layout as wl
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.stage_steps import split_at

WMMA, WGMMA = "wmma", "wgmma"
WGMMA_ARCHS = ("sm_90",)


def warpgroup_shaped(state, g) -> bool:
    """Whether Tensor Core group `g`'s drawn tiles fit wgmma: warps (wm, wn) and repeats
    (rm, rn) of its M and N splits with wn == 1, rm == 1, wm a multiple of 4, rn * 16 <= 256;
    16-bit operands (not TF32)."""
    (wm, rm, _), (wn, rn, _) = (split_at(state.steps, k).lengths for k in g.split_ids[:2])
    return (
        g.operand_bytes == 2
        and g.k_tile == ir.WMMA_TILE
        and wn == 1
        and rm == 1
        and wm % wl.WARPGROUP_WARPS == 0
        and rn * ir.WMMA_TILE <= wl.N_MAX
    )


class TensorCoreInstruction(InitRule):
    """Draws the instruction family of every Tensor Core stage of the state."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.tensor_core_instructions
        for g in plan.tensor_core:
            fits = [
                c
                for c in choices
                if c != WGMMA or (ctx.hardware.arch in WGMMA_ARCHS and warpgroup_shaped(state, g))
            ]
            if fits == [WMMA] or not fits:
                continue
            drawn = pick(fits, rng)
            if drawn != WMMA:
                state = state.tensor_core_instruction(g.acc, drawn)
        return state


__all__ = ["TensorCoreInstruction", "warpgroup_shaped"]
