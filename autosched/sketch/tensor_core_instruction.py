"""The `TensorCoreInstruction` init rule: which instruction family each Tensor Core stage of a
state becomes, "wmma" (nvcuda::wmma fragments) or "mma" (`ldmatrix` + `mma.sync` m16n8k16 on
per-lane registers, m16n8k8 for TF32; docs/TENSOR_CORES.md), drawn uniformly from
`SketchParams.tensor_core_instructions`.

Only the choice of "mma" is recorded (`State.tensor_core_instruction`); a state that keeps wmma
has the same steps as before the rule existed. The rule runs after the rules whose draws it
must not change, so their draws are those they would be without it.
"""

from __future__ import annotations

from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule

MMA = "mma"


class TensorCoreInstruction(InitRule):
    """Draws the instruction family of every Tensor Core stage of the state."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.tensor_core_instructions
        for g in plan.tensor_core:
            if MMA not in choices:
                continue
            if pick(choices, rng) == MMA:
                state = state.tensor_core_instruction(g.acc, MMA)
        return state


__all__ = ["TensorCoreInstruction"]
