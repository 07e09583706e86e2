"""The `WarpSpecialize` init rule: whether a wgmma stage whose shared operand tiles TMA copies is
warp-specialised (`State.warp_specialize`; lower/warp_specialize.py): one extra producer
warpgroup issues the copies, the consumer warpgroups only wait, multiply and release each slot
through an "empty" mbarrier, with no block barrier in the mainloop.

The rule draws uniformly from `SketchParams.warp_specializations` (default: both) for each
group that `OperandCopy` drew TMA for (`warp_specializable`: sm_90, wgmma, every shared
operand stage marked "tma", a pipeline of at least as many steps as slots), so it runs right
after that rule; any other group, GPU or family
draws nothing and samples as before. Only True is recorded (`WS` on the accumulator stage).
Lowering applies it where the kernel holds the TMA pipeline it proves (else the mark is a
no-op), in the device program only: the features read the pipeline it replaces.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.schedule.loop_state import State
from autosched.sketch.factorization import pick
from autosched.sketch.fragment_double_buffer import group_lengths
from autosched.sketch.init_base import InitRule
from autosched.sketch.operand_copy import TMA
from autosched.sketch.tensor_core_instruction import WGMMA, WGMMA_ARCHS
from autosched.sketch.tensor_core_plan import TensorCoreGroup
from measure.hardware import HardwareParams


def warp_specializable(
    hw: HardwareParams,
    g: TensorCoreGroup,
    instruction: str,
    copy: str,
    lengths: Sequence[tuple[int, ...]],
    slots: int,
) -> bool:
    """Whether group `g`, of this instruction family with its operands copied by `copy`, its
    split `lengths` and `slots` pipeline slots, may be warp-specialised (see the module
    docstring): its pipeline's loop must run at least `slots` steps, so that the producer
    refills a slot (a shorter one has every tile issued before it starts)."""
    if hw.arch not in WGMMA_ARCHS or instruction != WGMMA or copy != TMA or not g.shared:
        return False
    steps = -(-g.tiles[2] // lengths[2][0]) * g.window_steps
    return steps >= slots


class WarpSpecialize(InitRule):
    """Draws whether each TMA-fed wgmma stage gets a producer warpgroup."""

    def apply(self, ctx, plan, state: State, rng):
        choices = ctx.params.warp_specializations
        if True not in choices:
            return state
        for g in plan.tensor_core:
            instruction = state.stages[g.acc].tensor_core_instruction
            copies = {state.stages[c].operand_copy for c in g.shared}
            copy = copies.pop() if len(copies) == 1 else ""
            slots = max((state.stages[c].pipeline_stages for c in g.shared), default=0)
            lengths = group_lengths(state, g)
            fits = warp_specializable(ctx.hardware, g, instruction, copy, lengths, slots)
            if fits and pick(choices, rng):
                state = state.warp_specialize(g.acc)
        return state


__all__ = ["WarpSpecialize", "warp_specializable"]
