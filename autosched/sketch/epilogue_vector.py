"""The `EpilogueVector` init rule: whether the epilogue of a Tensor Core stage writes its output
in 16-byte vectors.

A Tensor Core stage with an element-wise epilogue (the cast, bias or relu that is the kernel's
root, `tensor_core._tile_epilogue`) stores its accumulators to a shared tile, and the epilogue's
threads copy that tile out: the block tile's (rows x columns) fused, split into 32 lanes and
then into the block's warps, one element a thread per iteration. For a product that moves more
bytes than it multiplies (a batch_matmul with K = 64 writes four times the bytes it reads) those
2-byte stores, a warp's 64 bytes an instruction, set the kernel's time. The vector form splits
the fused loop by a vector of 16 bytes of the output first (8 bf16 / fp16, 4 fp32), vectorized:
each thread then reads its accumulators from the shared tile as float4s and writes one 16-byte
vector, a warp 512 contiguous bytes of the output. The other loops keep their order and binding.
The shared tile's rows are padded too (`with_padded_rows`): the accumulators reach it as float2
pairs of 4 rows a phase, which on rows of a multiple of 32 words meet on the same 8 banks.

The split must come before the lanes' split, which the sketch recorded (`TensorCoreGroup.lanes`),
so the rule rebuilds the state with its steps (the split, its `vectorize`, the padding)
inserted there: the later steps keep their iterator positions (the vector loop is the stage's
innermost) and their references to steps past the insertion move by as many (`_shifted`).
`without_vector_epilogues` takes them out again: the records then start with the sketch's, as
the search's Tensor Core mutations expect.

Where it applies (`epilogue_vector_width`): on sm_90, for any instruction family (the copy-out
reads the shared tile, whatever stored it), the epilogue of a matrix product or of an implicit
GEMM conv whose M and N are whole 16-wide tiles and whose output rows hold whole vectors. A
conv's epilogue writes its pixels through the reshape (`implicit_gemm.py`): an NHWC output's
rows are a pixel's channels, so a vector is 8 channels of one pixel, and the store is as
contiguous as a matmul's (the 1x1 convs of ResNet-50 at batch 32 write 4 to 16 bytes of output
per multiply-add of their K, and their scalar stores set their time). An NCHW output's rows are
an image's pixels; where the printer cannot prove a vector's 8 elements contiguous and aligned
(`codegen/lanes.vector_base`), it stores them one by one, the same values.
There the rule draws uniformly from `SketchParams.epilogue_vectors` (even odds by default;
always a vector where `epilogue_vectors` holds True and the product is `hopper_sized`);
elsewhere it draws nothing, so other GPUs are sampled as before. It runs after every rule whose
draws it reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from autosched.lower import ir
from autosched.schedule.loop_state import State
from autosched.schedule.stage import SplitRel
from autosched.schedule.steps import (
    AnnotationStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    NarrowTileStep,
    SplitStep,
    Step,
    StorageAlignStep,
)
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.stage_steps import split_extent
from autosched.sketch.tensor_core import MMA
from autosched.sketch.tensor_core_instruction import WGMMA_ARCHS, hopper_sized
from autosched.sketch.tensor_core_plan import TensorCoreGroup
from autosched.sketch.utils import attach_target
from autosched.te.dtype import BYTES, HALF_DTYPES
from autosched.te.expr import Cast, Load, Reduce
from autosched.te.tensor import ComputeOp, Tensor
from measure.hardware import HardwareParams

VECTOR_BYTES = 16  # one st.global.v4: a thread's share of a warp's 512-byte store
# the GPUs whose samples draw it (elsewhere the draws are those before the rule): those of wgmma
ARCHS = WGMMA_ARCHS
VECTORIZE = "vectorize"  # the annotation of the vector loop
# the instruction families whose accumulator stores may round to a 16-bit tile: per-lane pairs
# (wmma's store_matrix_sync writes float fragments as floats only)
NARROW_FAMILIES = ("mma", "wgmma")
BANKS, ROW_PAD = 32, 8  # shared memory's 4-byte banks; the words a row of the shared tile gains


def epilogue_vector_width(hw: HardwareParams, state: State, g: TensorCoreGroup) -> int | None:
    """The elements of a 16-byte vector of group `g`'s epilogue output where the vector form
    applies (see the module docstring), else None. An implicit GEMM's gathered operands do not
    matter here: the epilogue reads only the shared accumulator tile."""
    if hw.arch not in ARCHS or g.lanes is None:
        return None
    if any(split_extent(state.steps, k) % MMA for k in g.split_ids[:2]):
        return None
    out = state.stages[g.root].op
    if not isinstance(out, ComputeOp):
        return None
    width = VECTOR_BYTES // BYTES[out.dtype]
    shape = out.output(0).shape
    return width if shape and shape[-1] % width == 0 else None


def _shifted(step: Step, at: int, by: int) -> Step:
    """`step` with its references to steps at or past `at` moved by `by`."""
    if isinstance(step, FollowSplitStep) and step.src_step_id >= at:
        return replace(step, src_step_id=step.src_step_id + by)
    if isinstance(step, FollowFusedSplitStep):
        ids = tuple(k + by if k >= at else k for k in step.src_step_ids)
        return replace(step, src_step_ids=ids)
    return step


def with_vector_epilogue(
    state: State, at: int, width: int, store: int, narrow: bool = False
) -> State:
    """`state` with the epilogue's fused tile loop, split into lanes by step `at`, first split
    by `width` and the inner part vectorized, and the shared tile of the product's store stage
    `store` padded (`with_padded_rows`) and, with `narrow`, kept in the output's 16-bit type
    (`State.narrow_tile`); the steps from `at` on replayed after them."""
    lanes = state.steps[at]
    assert isinstance(lanes, SplitStep)  # lanes_split found it
    out = state.dag.get_init_state()
    for step in state.steps[:at]:
        out = out.apply(step)
    stage = out.stages[lanes.stage_id]
    fused = stage.iters[lanes.iter_id].name
    out = out.split(lanes.stage_id, fused, [width])
    out = with_padded_rows(out.vectorize(lanes.stage_id, f"{fused}_i"), store)
    if narrow:
        out = out.narrow_tile(store)
    inserted = len(out.steps) - at
    for step in state.steps[at:]:
        out = out.apply(_shifted(step, at, inserted))
    return out


def with_padded_rows(state: State, store: int) -> State:
    """`state` with the shared tile of store stage `store` padded by `ROW_PAD` words a row, to
    a row stride of `ROW_PAD` or `BANKS - ROW_PAD` words mod 32: the accumulator pairs'
    float2 stores reach 4 rows a phase, whose 8-bank windows then differ (on rows of a
    multiple of 32 words they all meet: 4-way conflicts). Unchanged where the rows' iterator
    was fused away or the row's width is not known."""
    stage = state.stages[store]
    if not isinstance(stage.op, ComputeOp) or len(stage.op.axis) < 2:
        return state
    rows, cols = (a.name for a in stage.op.axis[-2:])
    splits = {r.parent: r for r in stage.relations if isinstance(r, SplitRel)}
    names = {it.name for it in stage.iters}
    while rows not in names and rows in splits:  # the outermost part of its splits
        rows = splits[rows].children[0]
    width = splits[cols].lengths if cols in splits else ()
    if rows not in names or not width or None in width or not splits[cols].inner_to_outer:
        return state
    offset = (math.prod(width) + ROW_PAD) % BANKS
    return state.storage_align(store, rows, BANKS, offset)


def _vector_steps(records: tuple, at: int, g: TensorCoreGroup) -> int:
    """How many records from `at` on are group `g`'s vector epilogue (`with_vector_epilogue`):
    the epilogue's split and `vectorize`, then the store stage's padding and its narrow tile
    where it has them; 0 where they are not there."""
    split, vector = records[at : at + 2] if len(records) >= at + 2 else (None, None)
    if split is None or vector is None:
        return 0
    if not (split[0] == SplitStep.TAG and split[1] == g.root):
        return 0
    if not (vector[0] == AnnotationStep.TAG and vector[1] == g.root and vector[3] == VECTORIZE):
        return 0
    n = 2
    for tag in (StorageAlignStep.TAG, NarrowTileStep.TAG):
        n += len(records) > at + n and records[at + n][:2] == (tag, g.store)
    return n


def without_vector_epilogues(records: tuple, groups: Sequence[TensorCoreGroup]) -> tuple:
    """`records` with the vector epilogue steps of `groups` taken out (`with_vector_epilogue`
    undone): the records the same draws make without them, which start with their sketch's."""
    for g in sorted(groups, key=lambda g: g.lanes or 0, reverse=True):
        at = g.lanes
        n = _vector_steps(records, at, g) if at is not None else 0
        if at is not None and n:
            rest = (_shifted(Step.from_record(r), at, -n).to_record() for r in records[at + n :])
            records = records[:at] + tuple(rest)
    return records


def vector_epilogue_stages(state: State) -> list[int]:
    """The stages of `state` that copy a Tensor Core stage's shared tile out in vectors: the
    root an accumulator's store stage is computed at, with a vectorized loop."""
    out = []
    for i, stage in enumerate(state.stages):
        if stage.scope != ir.ACCUMULATOR_SCOPE:
            continue
        root = attach_target(state, attach_target(state, i))
        if any(it.annotation == VECTORIZE for it in state.stages[root].iters):
            out.append(root)
    return out


def narrow_tile_fits(state: State, g: TensorCoreGroup) -> bool:
    """Whether group `g`'s shared tile may be kept in 16 bits (`lower/narrow_tile.py`): its
    accumulators are stored by mma-flavour fragments (the mma and wgmma families) and its
    epilogue only casts them to a 16-bit output. Lowering proves it again on the program."""
    out = state.stages[g.root].op
    if state.stages[g.acc].tensor_core_instruction not in NARROW_FAMILIES:
        return False
    if not isinstance(out, ComputeOp) or not isinstance(out.body, Cast):
        return False
    if out.body.dtype not in HALF_DTYPES:
        return False
    # the cast reads the product itself (a conv's op, whose pixels the implicit GEMM's reshape
    # gives), not an element-wise stage inlined into the epilogue (a bias, a relu)
    read = out.body.value
    product = isinstance(read, Load) and isinstance(read.buffer, Tensor)
    return product and isinstance(getattr(read.buffer.op, "body", None), Reduce)


class EpilogueVector(InitRule):
    """Draws 16-byte epilogue stores for every Tensor Core stage where they apply and, where
    its tile may be kept in 16 bits (`narrow_tile_fits`), whether it is
    (`SketchParams.narrow_epilogue_tiles`)."""

    def apply(self, ctx, plan, state, rng):
        choices = ctx.params.epilogue_vectors
        if True not in choices:
            return state
        # the last group first: an insertion moves the steps after it, a later group's among them
        for g in sorted(plan.tensor_core, key=lambda g: g.lanes or 0, reverse=True):
            width = epilogue_vector_width(ctx.hardware, state, g)
            if width is None or g.lanes is None:
                continue
            if hopper_sized(ctx, state, g) or pick(choices, rng):
                narrow_choices = ctx.params.narrow_epilogue_tiles
                narrow = True in narrow_choices and narrow_tile_fits(state, g)
                narrow = narrow and pick(narrow_choices, rng)
                state = with_vector_epilogue(state, g.lanes, width, g.store, narrow)
        return state


__all__ = [
    "EpilogueVector",
    "epilogue_vector_width",
    "narrow_tile_fits",
    "vector_epilogue_stages",
    "with_padded_rows",
    "with_vector_epilogue",
    "without_vector_epilogues",
]
