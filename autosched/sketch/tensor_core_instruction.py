"""The `TensorCoreInstruction` init rule: which instruction family each Tensor Core stage of a
state becomes, "wmma" (nvcuda::wmma fragments) or "mma" (`ldmatrix` + `mma.sync` m16n8k16 on
per-lane registers; docs/TENSOR_CORES.md), drawn uniformly from
`SketchParams.tensor_core_instructions`.

Only the choice of "mma" is recorded (`State.tensor_core_instruction`); a state that keeps wmma
has the same steps as before the rule existed. TF32 stages (float32 operands) keep wmma, since
ldmatrix and m16n8k16 take 16-bit operands. The rule runs last, so the draws of the other rules
are those they would be without it.
"""

from __future__ import annotations

from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule

MMA = "mma"
HALF_BYTES = 2  # the operand element size that ldmatrix and mma.sync m16n8k16 take


class TensorCoreInstruction(InitRule):
    """Draws the instruction family of every 16-bit Tensor Core stage of the state."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.tensor_core_instructions
        for g in plan.tensor_core:
            if g.operand_bytes != HALF_BYTES or MMA not in choices:
                continue
            if pick(choices, rng) == MMA:
                state = state.tensor_core_instruction(g.acc, MMA)
        return state


__all__ = ["TensorCoreInstruction"]
