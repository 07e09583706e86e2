"""The mutations of a Tensor Core stage's init-rule choices that no split mutation reaches: its
instruction family (`TensorCoreInstruction`: wmma or ldmatrix + mma.sync), its pipeline depth
(`PipelineStages`: 2 to 5 shared-memory slots), the register double buffering of its mma
fragments (`FragmentDoubleBuffer`) and how a wgmma stage's operand tiles are copied
(`OperandCopy`: cp.async or TMA). Without them the evolution keeps whatever the fresh sample
drew, and cannot carry a good tiling from wmma to mma or from 2 to 4 stages.

The four rules record their choices last (`TC` records, then `PS`, then `FB`, then `OC`, group
by group) and record only what differs from the default (mma; more than 2 slots; doubled
fragments; TMA). A
mutation rewrites that tail of the records the way the rules would have written it for the new
choice (`with_choices`), so a mutated candidate has exactly the records of a fresh sample with
the same draws (one identity for the caches and the measured set), and replays as any record
does.

    child = MUTATIONS["tensor_core_instruction"].apply(ctx, [parent], rng)   # or None
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autosched.schedule.steps import (
    DoubleBufferStep,
    FragmentDoubleBufferStep,
    OperandCopyStep,
    PipelineStagesStep,
    StorageAlignStep,
    TensorCoreInstructionStep,
)
from autosched.search.mutations import (
    Mutation,
    Records,
    TensorCoreChoices,
    as_split,
)
from autosched.sketch.factorization import pick
from autosched.sketch.fragment_double_buffer import eligible
from autosched.sketch.operand_copy import CP_ASYNC, TMA, tma_fits
from autosched.sketch.pipeline_stages import DOUBLE, group_draw, pipelined_bytes
from autosched.sketch.tensor_core_instruction import MMA, WGMMA, WMMA
from autosched.sketch.tensor_core_plan import TensorCoreGroup

_TAIL_TAGS = (
    TensorCoreInstructionStep.TAG,
    PipelineStagesStep.TAG,
    FragmentDoubleBufferStep.TAG,
    OperandCopyStep.TAG,
)


@dataclass(frozen=True)
class GroupChoices:
    """One Tensor Core group's choices of the four rules."""

    instruction: str = WMMA
    depth: int = DOUBLE
    doubled_fragments: bool = False
    operand_copy: str = CP_ASYNC

    @classmethod
    def of(cls, records: Records, g: TensorCoreGroup) -> GroupChoices:
        """The choices group `g` has in `records`."""
        tc, ps, fb, oc = _TAIL_TAGS
        instruction = next((r[2] for r in records if r[0] == tc and r[1] == g.acc), WMMA)
        depth = next((r[2] for r in records if r[0] == ps and r[1] in g.shared), DOUBLE)
        doubled = any(r[0] == fb and r[1] == g.acc for r in records)
        copy = next((r[2] for r in records if r[0] == oc and r[1] in g.shared), CP_ASYNC)
        return cls(instruction, depth, doubled, copy)


def with_choices(
    records: Records, groups: tuple[TensorCoreGroup, ...], choices: Mapping[int, GroupChoices]
) -> Records:
    """`records` with their TC, PS, FB and OC records rewritten for these choices (per group,
    by the accumulator's stage index), in the order and form the init rules write them."""
    head = tuple(r for r in records if r[0] not in _TAIL_TAGS)
    tc = tuple(
        TensorCoreInstructionStep(g.acc, choices[g.acc].instruction).to_record()
        for g in groups
        if choices[g.acc].instruction != WMMA
    )
    ps = tuple(
        PipelineStagesStep(c, choices[g.acc].depth).to_record()
        for g in groups
        if choices[g.acc].depth != DOUBLE
        for c in g.shared
    )
    fb = tuple(
        FragmentDoubleBufferStep(g.acc).to_record()
        for g in groups
        if choices[g.acc].instruction == MMA and choices[g.acc].doubled_fragments
    )
    oc = tuple(
        OperandCopyStep(c, TMA).to_record()
        for g in groups
        if choices[g.acc].instruction == WGMMA and choices[g.acc].operand_copy == TMA
        for c in g.shared
    )
    return head + tc + ps + fb + oc


def _groups(ctx, records: Records) -> tuple[TensorCoreChoices | None, tuple]:
    space = ctx.tensor_core
    return space, (space.groups(records) if space is not None else ())


def _rewrite(records: Records, groups, g: TensorCoreGroup, **change) -> Records:
    choices = {h.acc: GroupChoices.of(records, h) for h in groups}
    choices[g.acc] = dataclasses.replace(choices[g.acc], **change)
    return with_choices(records, groups, choices)


def _split_lengths(records: Records, g: TensorCoreGroup) -> list[tuple[int, ...]]:
    return [as_split(records[k]).lengths for k in g.split_ids]


def _buffered(records: Records) -> set[int]:
    return {r[1] for r in records if r[0] == DoubleBufferStep.TAG}


def _switch_one(
    records: Records,
    groups,
    candidates: list[TensorCoreGroup],
    rng: random.Random,
    field: str,
    options_of: Callable[[TensorCoreGroup], list],
) -> Records | None:
    """The first of `candidates` (shuffled) with another value of its choice `field` to take
    (`options_of(g)`, which leaves out the current one), rewritten to a value picked among
    them; None where no candidate has one."""
    rng.shuffle(candidates)
    for g in candidates:
        options = options_of(g)
        if options:
            return _rewrite(records, groups, g, **{field: pick(options, rng)})
    return None


class TensorCoreInstructionMutation(Mutation):
    """The other instruction family (of `SketchParams.tensor_core_instructions`; wmma or mma)
    for one Tensor Core stage: its tiles, fetch and pipeline stay as they are (a stage leaving
    mma leaves its doubled fragments too). A wgmma stage keeps its family."""

    NAME = "tensor_core_instruction"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _groups(ctx, records)
        if space is None or not groups:
            return None
        g = pick(groups, rng)
        current = GroupChoices.of(records, g).instruction
        # wgmma re-tiles the warps when drawn (tensor_core_instruction.py): only the init rule
        # enters or leaves it
        options = [f for f in space.instructions if f not in (current, WGMMA)]
        if current == WGMMA or not options:
            return None
        return _rewrite(records, groups, g, instruction=pick(options, rng), doubled_fragments=False)


class PipelineStagesMutation(Mutation):
    """Another pipeline depth (of `SketchParams.pipeline_stages`) for one double-buffered Tensor
    Core stage, among the depths whose operand slots and epilogue tile fit the opt-in shared
    memory: the `PipelineStages` init rule's menu and fit check, on the candidate's tiles."""

    NAME = "pipeline_stages"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _groups(ctx, records)
        if space is None or space.pipeline_stages == (DOUBLE,):
            return None
        buffered = _buffered(records)
        eligible_groups = [g for g in groups if g.shared and set(g.shared) <= buffered]

        def depths(g: TensorCoreGroup) -> list[int]:
            current = GroupChoices.of(records, g).depth
            return [s for s in self.fitting(space, records, g) if s != current]

        return _switch_one(records, groups, eligible_groups, rng, "depth", depths)

    @staticmethod
    def fitting(space: TensorCoreChoices, records: Records, g: TensorCoreGroup) -> list[int]:
        """The depths group `g` may have with the tiles drawn in `records` (2 when none fits)."""
        pads_by_stage = {
            r[1]: r[4] for r in records if r[0] == StorageAlignStep.TAG and r[1] in g.shared
        }
        pads = tuple(pads_by_stage.get(c, 0) for c in g.shared)
        draw = group_draw(_split_lengths(records, g), pads)
        limit = space.hardware.max_shared_memory_per_block_optin
        fits = [s for s in space.pipeline_stages if pipelined_bytes(draw, g, s) <= limit]
        return fits or [DOUBLE]


class FragmentDoubleBufferMutation(Mutation):
    """Register double buffering of one mma stage's fragments switched on or off (of
    `SketchParams.fragment_double_buffers`), on where the `FragmentDoubleBuffer` init rule may
    draw it (`fragment_double_buffer.eligible`: double-buffered shared operands, an even K chunk
    and registers for two slots)."""

    NAME = "fragment_double_buffer"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _groups(ctx, records)
        if space is None:
            return None
        buffered = _buffered(records)

        def switches(g: TensorCoreGroup) -> list[bool]:
            now = GroupChoices.of(records, g)
            if now.instruction != MMA:
                return []
            lengths = _split_lengths(records, g)
            allowed = eligible(space.hardware, g, lengths, MMA, buffered)
            return [
                x
                for x in space.fragment_double_buffers
                if x != now.doubled_fragments and (allowed or not x)
            ]

        return _switch_one(records, groups, list(groups), rng, "doubled_fragments", switches)


class OperandCopyMutation(Mutation):
    """cp.async or TMA (of `SketchParams.operand_copies`) for one wgmma stage's shared operand
    tiles, switched where the `OperandCopy` init rule may draw TMA (`operand_copy.tma_fits`)."""

    NAME = "operand_copy"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _groups(ctx, records)
        if space is None or TMA not in space.operand_copies:
            return None
        buffered = _buffered(records)

        def copies(g: TensorCoreGroup) -> list[str]:
            now = GroupChoices.of(records, g)
            lengths = _split_lengths(records, g)
            if not tma_fits(
                space.hardware, g, lengths, now.instruction, buffered, space.tma_im2col
            ):
                return []
            return [x for x in space.operand_copies if x != now.operand_copy]

        return _switch_one(records, groups, list(groups), rng, "operand_copy", copies)


__all__ = [
    "FragmentDoubleBufferMutation",
    "GroupChoices",
    "OperandCopyMutation",
    "PipelineStagesMutation",
    "TensorCoreInstructionMutation",
    "with_choices",
]
