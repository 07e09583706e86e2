"""The `FragmentDoubleBuffer` init rule: whether an mma Tensor Core stage holds its operand
fragments in two register slots (`State.fragment_double_buffer`; lower/fragment_double_buffer.py),
so that the next k-step's ldmatrix, and across double-buffered shared tiles the next tile's
first one, are in flight while the current step multiplies.

The rule draws from `SketchParams.fragment_double_buffers` (default: even odds) for each group
that the rewrite changes (`eligible`): an mma stage whose shared operand caches are all
double-buffered over more than one K tile, whose K chunk is an even number of k-steps and whose
fragments, doubled, still fit their share of a thread's registers. Only a choice of True is
recorded. It runs last, so the other rules' draws are those they would be without it.
"""

from __future__ import annotations

from autosched.schedule.loop_state import State
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.stage_steps import split_at
from autosched.sketch.tensor_core_init import (
    REGISTERS_PER_OPERAND_TILE,
    fragment_register_budget,
    fragment_registers,
)
from autosched.sketch.tensor_core_instruction import MMA
from autosched.sketch.tensor_core_plan import TensorCoreGroup
from measure.hardware import HardwareParams

SLOTS = 2  # register slots of a double-buffered fragment


def doubled_fragments_fit(hw: HardwareParams, lengths) -> bool:
    """Whether the fragments of a group with these M, N, K split lengths (warps, repeats, 16
    each; chunk, k tile) fit the fragments' register share with two slots of operands."""
    (wm, rm, _), (wn, rn, _), _ = lengths
    budget = fragment_register_budget(hw, wm * wn * hw.warp_size)
    extra = (SLOTS - 1) * REGISTERS_PER_OPERAND_TILE * (rm + rn)
    return fragment_registers(rm, rn) + extra <= budget


def eligible(
    hw: HardwareParams, g: TensorCoreGroup, lengths, instruction: str, buffered: set[int]
) -> bool:
    """Whether the rule may double-buffer group `g`'s fragments: mma, double-buffered shared
    operands over more than one K tile, an even K chunk (the cross-tile form), and registers
    for two slots."""
    chunk = lengths[2][0]
    return (
        instruction == MMA
        and bool(g.shared)
        and set(g.shared) <= buffered
        and chunk % SLOTS == 0
        and g.tiles[2] > chunk
        and doubled_fragments_fit(hw, lengths)
    )


def group_lengths(state: State, g: TensorCoreGroup) -> list[tuple[int, ...]]:
    """The drawn lengths of group `g`'s M, N and K splits."""
    return [split_at(state.steps, k).lengths for k in g.split_ids]


class FragmentDoubleBuffer(InitRule):
    """Draws register double buffering for every eligible mma stage of the state."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.fragment_double_buffers
        if True not in choices:
            return state
        buffered = {i for i, s in enumerate(state.stages) if s.double_buffer}
        for g in plan.tensor_core:
            instruction = state.stages[g.acc].tensor_core_instruction
            lengths = group_lengths(state, g)
            if eligible(ctx.hardware, g, lengths, instruction, buffered) and pick(choices, rng):
                state = state.fragment_double_buffer(g.acc)
        return state


__all__ = ["FragmentDoubleBuffer", "doubled_fragments_fit", "eligible", "group_lengths"]
