"""The mutations of a Tensor Core stage's init-rule choices that no split mutation reaches: its
instruction family (`TensorCoreInstruction`: wmma or ldmatrix + mma.sync), its pipeline depth
(`PipelineStages`: 2 to 5 shared-memory slots), the register double buffering of its mma
fragments (`FragmentDoubleBuffer`), how a wgmma stage's operand tiles are copied
(`OperandCopy`: cp.async or TMA) and whether a TMA-fed one is warp-specialised
(`WarpSpecialize`). Without them the evolution keeps whatever the fresh sample
drew, and cannot carry a good tiling from wmma to mma or from 2 to 4 stages.

The five rules record their choices last (`TC` records, then `PS`, then `FB`, then `OC`, then
`WS`, group by group) and record only what differs from the default (mma; more than 2 slots;
doubled fragments; TMA; a producer warpgroup). A
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
    WarpSpecializeStep,
)
from autosched.search.mutations import (
    Mutation,
    Records,
    TensorCoreChoices,
    as_split,
    with_record,
)
from autosched.sketch.factorization import pick
from autosched.sketch.fragment_double_buffer import eligible
from autosched.sketch.operand_copy import CP_ASYNC, TMA, tma_fits
from autosched.sketch.pipeline_stages import DOUBLE, group_draw, pipelined_bytes
from autosched.sketch.tensor_core_init import TensorCoreDraw
from autosched.sketch.tensor_core_instruction import MMA, WGMMA, WMMA
from autosched.sketch.tensor_core_plan import TensorCoreGroup
from autosched.sketch.warp_specialize import warp_specializable
from autosched.sketch.warpgroup_tile import shape_fits

_TAIL_TAGS = (
    TensorCoreInstructionStep.TAG,
    PipelineStagesStep.TAG,
    FragmentDoubleBufferStep.TAG,
    OperandCopyStep.TAG,
    WarpSpecializeStep.TAG,
)


@dataclass(frozen=True)
class GroupChoices:
    """One Tensor Core group's choices of the five rules."""

    instruction: str = WMMA
    depth: int = DOUBLE
    doubled_fragments: bool = False
    operand_copy: str = CP_ASYNC
    warp_specialized: bool = False

    @classmethod
    def of(cls, records: Records, g: TensorCoreGroup) -> GroupChoices:
        """The choices group `g` has in `records`."""
        tc, ps, fb, oc, ws = _TAIL_TAGS
        instruction = next((r[2] for r in records if r[0] == tc and r[1] == g.acc), WMMA)
        depth = next((r[2] for r in records if r[0] == ps and r[1] in g.shared), DOUBLE)
        doubled = any(r[0] == fb and r[1] == g.acc for r in records)
        copy = next((r[2] for r in records if r[0] == oc and r[1] in g.shared), CP_ASYNC)
        specialized = any(r[0] == ws and r[1] == g.acc for r in records)
        return cls(instruction, depth, doubled, copy, specialized)


def with_choices(
    records: Records, groups: tuple[TensorCoreGroup, ...], choices: Mapping[int, GroupChoices]
) -> Records:
    """`records` with their TC, PS, FB, OC and WS records rewritten for these choices (per group,
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
    ws = tuple(
        WarpSpecializeStep(g.acc).to_record()
        for g in groups
        if choices[g.acc].instruction == WGMMA
        and choices[g.acc].operand_copy == TMA
        and choices[g.acc].warp_specialized
    )
    return head + tc + ps + fb + oc + ws


def _groups(ctx, records: Records) -> tuple[TensorCoreChoices | None, tuple]:
    space = ctx.tensor_core
    return space, (space.groups(records) if space is not None else ())


def _rewrite(records: Records, groups, g: TensorCoreGroup, **change) -> Records:
    choices = {h.acc: GroupChoices.of(records, h) for h in groups}
    choices[g.acc] = dataclasses.replace(choices[g.acc], **change)
    return with_choices(records, groups, choices)


def _split_lengths(records: Records, g: TensorCoreGroup) -> list[tuple[int, ...]]:
    return [as_split(records[k]).lengths for k in g.split_ids]


def _group_draw(records: Records, g: TensorCoreGroup, tma_unpadded: bool = False) -> TensorCoreDraw:
    """The tiles drawn for group `g` in `records`: its split lengths and row padding (with
    `tma_unpadded`, none for TMA-fed tiles, which are stored unpadded whatever was drawn; the
    init rules' estimate counts it)."""
    pads_by_stage = {
        r[1]: r[4] for r in records if r[0] == StorageAlignStep.TAG and r[1] in g.shared
    }
    if tma_unpadded and GroupChoices.of(records, g).operand_copy == TMA:
        pads_by_stage = {}
    pads = tuple(pads_by_stage.get(c, 0) for c in g.shared)
    return group_draw(_split_lengths(records, g), pads)


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
        draw = _group_draw(records, g)
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


class WarpSpecializeMutation(Mutation):
    """A producer warpgroup for one TMA-fed wgmma stage switched on or off (of
    `SketchParams.warp_specializations`), where the `WarpSpecialize` init rule may draw it
    (`warp_specialize.warp_specializable`)."""

    NAME = "warp_specialize"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _groups(ctx, records)
        if space is None or True not in space.warp_specializations:
            return None

        def switches(g: TensorCoreGroup) -> list[bool]:
            now = GroupChoices.of(records, g)
            lengths = _split_lengths(records, g)
            hw, instruction, copy = space.hardware, now.instruction, now.operand_copy
            if not warp_specializable(hw, g, instruction, copy, lengths, now.depth):
                return []
            return [x for x in space.warp_specializations if x != now.warp_specialized]

        return _switch_one(records, groups, list(groups), rng, "warp_specialized", switches)


class WarpgroupTileMutation(Mutation):
    """One wgmma stage's block tile moved to a neighbouring shape: its width (wgmma's N) or its
    warpgroups along M doubled or halved, among the shapes warpgroups compute
    (`warpgroup_tile.shape_fits`). A pipelined stage keeps its slots or, for a doubled tile,
    drops one (128x128 over 4 slots -> 128x256 over 3), and drops more where those do not fit;
    a halved tile keeps them or takes one more (the way back), so evolution steps between the
    fast configurations of each size. TMA becomes cp.async where the new tiles leave its boxes
    (`operand_copy.tma_fits`). The K chunk, padding and fetch stay."""

    NAME = "warpgroup_tile"
    TENSOR_CORE_ONLY = True

    def apply(self, ctx, parents, rng: random.Random):
        records = parents[0]
        space, groups = _groups(ctx, records)
        if space is None:
            return None
        wgmma = [g for g in groups if GroupChoices.of(records, g).instruction == WGMMA]
        rng.shuffle(wgmma)
        for g in wgmma:
            moves = self.moves(space, records, groups, g)
            if moves:
                return pick(moves, rng)
        return None

    @classmethod
    def moves(
        cls, space: TensorCoreChoices, records: Records, groups, g: TensorCoreGroup
    ) -> list[Records]:
        """The records of every neighbouring shape of group `g` that fits (see the class)."""
        limit = space.hardware.max_shared_memory_per_block_optin
        (warps, _, m16), (_, cols, n16), k_lengths = _split_lengths(records, g)
        now = GroupChoices.of(records, g)
        pipelined = set(g.shared) <= _buffered(records)
        out = []
        for new_warps, new_cols in (
            (warps, cols * 2),
            (warps, cols // 2),
            (warps * 2, cols),
            (warps // 2, cols),
        ):
            if not new_cols or not shape_fits(space.hardware, g, new_warps, new_cols):
                continue
            lengths = ((new_warps, 1, m16), (1, new_cols, n16), k_lengths)
            moved = records
            for k, new in zip(g.split_ids, lengths, strict=True):
                s = as_split(records[k])
                moved = with_record(moved, k, dataclasses.replace(s, lengths=new))
            depths = [now.depth]
            if pipelined:
                depths = cls.depths(space, moved, g, now.depth, new_warps * new_cols > warps * cols)
            elif _group_draw(moved, g, True).pipelined_bytes(g, 1) > limit:
                continue
            copy = now.operand_copy
            if copy == TMA and not tma_fits(space.hardware, g, lengths, WGMMA, _buffered(moved)):
                copy = CP_ASYNC
            out += [_rewrite(moved, groups, g, depth=d, operand_copy=copy) for d in depths]
        return out

    @staticmethod
    def depths(
        space: TensorCoreChoices, records: Records, g: TensorCoreGroup, depth: int, grown: bool
    ) -> list[int]:
        """The slots a pipelined group takes with its new tiles (in `records`): its `depth` and
        one fewer for a grown tile (one more for a shrunk one), those that fit; a grown tile
        that fits neither takes the deepest that fits (none: no move)."""
        draw, limit = (
            _group_draw(records, g, True),
            space.hardware.max_shared_memory_per_block_optin,
        )
        menu = set(space.pipeline_stages) | {DOUBLE}
        fits = [d for d in sorted(menu) if draw.pipelined_bytes(g, d) <= limit]
        near = [d for d in (depth, depth - 1 if grown else depth + 1) if d in fits]
        below = [d for d in fits if d < depth and grown]
        if near or not below:
            return near
        return [max(below)]


__all__ = [
    "FragmentDoubleBufferMutation",
    "GroupChoices",
    "OperandCopyMutation",
    "PipelineStagesMutation",
    "TensorCoreInstructionMutation",
    "WarpSpecializeMutation",
    "WarpgroupTileMutation",
    "with_choices",
]
