"""The mutations of a Tensor Core stage's two init-rule choices that no split mutation reaches:
its instruction family (`TensorCoreInstruction`: wmma or ldmatrix + mma.sync) and its pipeline
depth (`PipelineStages`: 2 to 5 shared-memory slots). Without them the evolution keeps whatever
the fresh sample drew, and cannot carry a good tiling from wmma to mma or from 2 to 4 stages.

Both rules record their choice last (`TC` records, then `PS` records, group by group) and record
only what differs from the default (mma; more than 2 slots). A mutation rewrites that tail of
the records the way the rules would have written it for the new choice, so a mutated candidate
has exactly the records of a fresh sample with the same draws (one identity for the caches and
the measured set), and replays as any record does.

    child = MUTATIONS["tensor_core_instruction"].apply(ctx, [parent], rng)   # or None
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from autosched.schedule.steps import (
    DoubleBufferStep,
    PipelineStagesStep,
    StorageAlignStep,
    TensorCoreInstructionStep,
)
from autosched.search.mutations import (
    Mutation,
    MutationContext,
    Records,
    TensorCoreChoices,
    as_split,
)
from autosched.sketch.factorization import pick
from autosched.sketch.pipeline_stages import DOUBLE, group_draw, pipelined_bytes
from autosched.sketch.tensor_core_instruction import MMA
from autosched.sketch.tensor_core_plan import TensorCoreGroup

WMMA = "wmma"  # the family of a stage without a TC record
_TAIL_TAGS = (TensorCoreInstructionStep.TAG, PipelineStagesStep.TAG)


def instruction_of(records: Records, g: TensorCoreGroup) -> str:
    """The instruction family group `g` has in `records`."""
    tc = TensorCoreInstructionStep.TAG
    return next((r[2] for r in records if r[0] == tc and r[1] == g.acc), WMMA)


def depth_of(records: Records, g: TensorCoreGroup) -> int:
    """The slots of group `g`'s shared operand tiles in `records` (2 when no PS record)."""
    ps = PipelineStagesStep.TAG
    return next((r[2] for r in records if r[0] == ps and r[1] in g.shared), DOUBLE)


def with_choices(
    records: Records,
    groups: tuple[TensorCoreGroup, ...],
    instructions: Mapping[int, str],
    depths: Mapping[int, int],
) -> Records:
    """`records` with their TC and PS records rewritten for these choices (per group, by the
    accumulator's stage index), in the order and form the init rules write them."""
    head = tuple(r for r in records if r[0] not in _TAIL_TAGS)
    tc = tuple(
        TensorCoreInstructionStep(g.acc, MMA).to_record()
        for g in groups
        if instructions[g.acc] == MMA
    )
    ps = tuple(
        PipelineStagesStep(c, depths[g.acc]).to_record()
        for g in groups
        if depths[g.acc] != DOUBLE
        for c in g.shared
    )
    return head + tc + ps


def _choices(ctx: MutationContext, records: Records) -> tuple[TensorCoreChoices | None, tuple]:
    space = ctx.tensor_core
    return space, (space.groups(records) if space is not None else ())


def _rewrite(records: Records, groups, g: TensorCoreGroup, **change: int | str) -> Records:
    instructions = {h.acc: instruction_of(records, h) for h in groups}
    depths = {h.acc: depth_of(records, h) for h in groups}
    if "instruction" in change:
        instructions[g.acc] = str(change["instruction"])
    if "depth" in change:
        depths[g.acc] = int(change["depth"])
    return with_choices(records, groups, instructions, depths)


class TensorCoreInstructionMutation(Mutation):
    """The other instruction family (of `SketchParams.tensor_core_instructions`) for one Tensor
    Core stage: its tiles, fetch and pipeline stay as they are."""

    NAME = "tensor_core_instruction"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _choices(ctx, records)
        if space is None or not groups:
            return None
        g = pick(groups, rng)
        options = [f for f in space.instructions if f != instruction_of(records, g)]
        if not options:
            return None
        return _rewrite(records, groups, g, instruction=pick(options, rng))


class PipelineStagesMutation(Mutation):
    """Another pipeline depth (of `SketchParams.pipeline_stages`) for one double-buffered Tensor
    Core stage, among the depths whose operand slots and epilogue tile fit the opt-in shared
    memory: the `PipelineStages` init rule's menu and fit check, on the candidate's tiles."""

    NAME = "pipeline_stages"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _choices(ctx, records)
        if space is None or space.pipeline_stages == (DOUBLE,):
            return None
        buffered = {r[1] for r in records if r[0] == DoubleBufferStep.TAG}
        eligible = [g for g in groups if g.shared and set(g.shared) <= buffered]
        rng.shuffle(eligible)
        for g in eligible:
            current = depth_of(records, g)
            options = [s for s in self.fitting(space, records, g) if s != current]
            if options:
                return _rewrite(records, groups, g, depth=pick(options, rng))
        return None

    @staticmethod
    def fitting(space: TensorCoreChoices, records: Records, g: TensorCoreGroup) -> list[int]:
        """The depths group `g` may have with the tiles drawn in `records` (2 when none fits)."""
        lengths = [as_split(records[k]).lengths for k in g.split_ids]
        pads_by_stage = {
            r[1]: r[4] for r in records if r[0] == StorageAlignStep.TAG and r[1] in g.shared
        }
        pads = tuple(pads_by_stage.get(c, 0) for c in g.shared)
        draw = group_draw(lengths, pads)
        limit = space.shared_memory_limit
        fits = [s for s in space.pipeline_stages if pipelined_bytes(draw, g, s) <= limit]
        return fits or [DOUBLE]


__all__ = [
    "PipelineStagesMutation",
    "TensorCoreInstructionMutation",
    "depth_of",
    "instruction_of",
    "with_choices",
]
