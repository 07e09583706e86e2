"""The `PipelineStages` init rule: how deep the shared-memory pipeline of a double-buffered
Tensor Core stage is (`State.pipeline_stages`: 2 to 5 slots of its A and B tiles, fetched with
`cp.async` that many - 1 iterations ahead; lower/double_buffer.py).

Per Tensor Core group whose shared operand caches DoubleBuffer marked, the rule draws the slot
count uniformly from `SketchParams.pipeline_stages`, among the counts whose operand tiles (each
count times the drawn tiles, padding included) and float32 epilogue tile fit in the device's
opt-in shared memory (the larger of the two: lowering lays the epilogue tile over the operand
tiles of a pipeline, `lower/shared_alias.py`); for a wgmma stage, among those of
`SketchParams.wgmma_pipeline_stages` that fit (3 or more slots by default, which keep a group of
wgmmas in flight), if any do. Only a count above 2 is recorded, so a plain double-buffered state
keeps its steps. It runs after the rules whose draws it reads (the tiles, padding, double
buffering and instruction) and last, so that their draws are those they would be without it.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.schedule.loop_state import State
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.stage_steps import split_at
from autosched.sketch.tensor_core_init import TensorCoreDraw
from autosched.sketch.tensor_core_instruction import WGMMA
from autosched.sketch.tensor_core_plan import TensorCoreGroup

DOUBLE = 2  # the slots of a plain double-buffered stage


def _row_pad(state: State, c: int) -> int:
    """The elements FillTensorCore added to each row of shared stage c (storage_align's offset)."""
    align = state.stages[c].storage_align
    return 0 if align is None else align[2]


def group_draw(split_lengths: Sequence[tuple[int, ...]], pads: tuple[int, ...]) -> TensorCoreDraw:
    """The tiles drawn for a Tensor Core group, read back from the lengths of its M, N and K
    splits (`TensorCoreGroup.split_ids`) and its shared stages' row padding `pads`."""
    (wm, rm, _), (wn, rn, _), (chunk, k_tile) = split_lengths
    return TensorCoreDraw((wm, wn), (rm, rn), chunk, pads, k_tile)


def pipelined_bytes(draw: TensorCoreDraw, g: TensorCoreGroup, slots: int) -> int:
    """The shared memory of group `g`'s kernel with `slots` slots of its operand tiles: the
    drawn tiles' (FillTensorCore's estimate; bound inference may clip a padded edge below it)."""
    return draw.pipelined_bytes(g, slots)


def shared_bytes(state: State, g: TensorCoreGroup, slots: int) -> int:
    """`pipelined_bytes` of the tiles drawn in `state`."""
    lengths = [split_at(state.steps, k).lengths for k in g.split_ids]
    pads = tuple(_row_pad(state, c) for c in g.shared)
    return pipelined_bytes(group_draw(lengths, pads), g, slots)


class PipelineStages(InitRule):
    """Draws the pipeline depth of every double-buffered Tensor Core stage of the state."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.pipeline_stages
        limit = ctx.hardware.max_shared_memory_per_block_optin
        for g in plan.tensor_core:
            if not all(state.stages[c].double_buffer for c in g.shared) or choices == (DOUBLE,):
                continue
            fits = [s for s in choices if shared_bytes(state, g, s) <= limit] or [DOUBLE]
            if state.stages[g.acc].tensor_core_instruction == WGMMA:
                fits = [s for s in fits if s in ctx.params.wgmma_pipeline_stages] or fits
            slots = pick(fits, rng)
            if slots != DOUBLE:
                for c in g.shared:
                    state = state.pipeline_stages(c, slots)
        return state


__all__ = ["DOUBLE", "PipelineStages", "group_draw", "pipelined_bytes", "shared_bytes"]
