"""The plan of a sketch: what its structure says once, before any random decision.

`make_plan` finds a sketch's unknown splits, its multi-level tiled stages (`TileGroup`: their
splits and the smallest thread count they may use) and, per tiled stage, how each shared-memory
cache's tile grows with the tile sizes (`Footprint`), and its Tensor Core stages
(tensor_core_plan.py), so that the init rules can check a draw of
tile sizes against the GPU's limits without lowering.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autosched.lower.arith import to_affine
from autosched.schedule.loop_state import State
from autosched.schedule.stage import REDUCE, SPATIAL
from autosched.schedule.steps import FollowSplitStep, SplitStep
from autosched.sketch.params import SketchParams
from autosched.sketch.stage_steps import split_at, split_step_ids, splitting_steps
from autosched.sketch.tensor_core_plan import TensorCoreGroup, tensor_core_groups
from autosched.sketch.utils import (
    attach_target,
    is_inlined,
    needs_multi_level_tiling,
    row_part_in_registers,
    spatial_and_reduce_length,
)
from autosched.te.dtype import BYTES
from autosched.te.expr import IterVar, Load
from autosched.te.tensor import Tensor
from autosched.te.visitor import walk
from measure.hardware import HardwareParams


@dataclass
class Footprint:
    """How one shared cache's tile grows with the tile sizes: per read of the cached tensor and
    per tensor dimension, (coefficient, axis position) pairs of an affine index. Positions
    index the tiled stage's root iterators (spatial first, then reduction)."""

    cache: int
    shape: tuple[int, ...]
    nbytes: int
    reads: list[list[list[tuple[int, int]]]]

    def extents(self, tile: list[int], chunks: list[tuple[int, int]] | None = None) -> list[int]:
        """The tile's extent in each dimension of the cache: the widest read's affine range,
        at most the dimension. With `chunks`, axis p's tile is repeated chunks[p] = (count,
        gap) times, `gap` apart (what the virtual threads of a thread cover); repeats of a
        dimension's range overlap where the gap is shorter."""
        out = []
        for d, extent in enumerate(self.shape):
            best = 1
            for read in self.reads:
                span = sum(abs(c) * (tile[p] - 1) for c, p in read[d]) + 1
                if chunks:
                    for c, p in read[d]:
                        count, gap = chunks[p]
                        span += (count - 1) * min(abs(c) * gap, span)
                best = max(best, span)
            out.append(min(best, extent))
        return out

    def bytes(self, tile: list[int], chunks: list[tuple[int, int]] | None = None) -> int:
        """The tile's bytes (`extents`)."""
        return math.prod(self.extents(tile, chunks)) * self.nbytes


@dataclass
class TileGroup:
    """A multi-level tiled stage: its splits and what its tile sizes must satisfy."""

    tiled: int  # stage index of the tiled stage
    root: int  # the root stage whose loops carry the block / vthread / thread bindings
    spatial_ids: list[int]  # SplitStep ids, one per spatial axis (axis order)
    reduce_ids: list[int]
    min_threads: int
    footprints: list[Footprint] = field(default_factory=list)


@dataclass
class SketchPlan:
    """What the init rules need to know about one sketch, found once per sketch."""

    sketch: State
    unknown: list[int]  # SplitStep ids with unknown lengths, not in a group
    groups: list[TileGroup]
    # SplitStep ids that set a cross-thread reduction's thread count -> the reduction's length
    cross_thread: dict[int, int] = field(default_factory=dict)
    # Tensor Core stages: their splits are FillTensorCore's, their roots bound by the sketch
    tensor_core: list[TensorCoreGroup] = field(default_factory=list)
    # SplitStep ids of thread counts a row kept in registers follows -> the fewest threads
    # that keep each thread's share within `SketchParams.max_row_register_elems`
    min_threads: dict[int, int] = field(default_factory=dict)

    @property
    def tiled_roots(self) -> dict[int, TileGroup]:
        return {g.root: g for g in self.groups}


def _footprint(state: State, t: int, cache: int) -> Footprint | None:
    tiled, cached = state.stages[t], state.stages[cache]
    body = cached.compute_op.body
    if not (isinstance(body, Load) and isinstance(body.buffer, Tensor)):
        return None
    src = body.buffer.op
    op = tiled.compute_op
    axes = list(op.axis) + list(op.reduce_axis)
    pos = {id(a): p for p, a in enumerate(axes)}
    reads = []
    for node in walk(op.body):
        if isinstance(node, Load) and isinstance(node.buffer, Tensor) and node.buffer.op is src:
            dims = []
            for idx in node.indices:
                terms = []
                for c, atom in to_affine(idx, {}).terms.values():
                    if not isinstance(atom, IterVar) or id(atom) not in pos:
                        return None
                    terms.append((c, pos[id(atom)]))
                dims.append(terms)
            reads.append(dims)
    if not reads:
        return None
    return Footprint(cache, tuple(body.buffer.shape), BYTES.get(cached.op.dtype, 4), reads)


def cross_thread_splits(state: State) -> dict[int, int]:
    """SplitStep id -> reduction length, for each split that sets the thread count of a
    cross-thread reduction: the split of a reduction iterator with a part bound to threadIdx.x
    (the inner one, or the middle one above a vector of reduction steps), or the split such a
    reduction follows (its consumer's)."""
    out: dict[int, int] = {}
    for i, stage in enumerate(state.stages):
        bound = {
            it.name for it in stage.iters if it.kind == REDUCE and it.annotation == "threadIdx.x"
        }
        for k, rel in splitting_steps(state, i):
            if not bound.intersection(rel.children):
                continue
            step = state.steps[k]
            src = step.src_step_id if isinstance(step, FollowSplitStep) else k
            if isinstance(state.steps[src], SplitStep):
                out[src] = max(out.get(src, 0), spatial_and_reduce_length(stage)[1])
    return out


def make_plan(sketch: State, params: SketchParams, hardware: HardwareParams) -> SketchPlan:
    """Analyse a sketch once: its unknown splits and tiled stages."""
    groups: list[TileGroup] = []
    grouped: set[int] = set()
    for t, stage in enumerate(sketch.stages):
        if is_inlined(stage) or not needs_multi_level_tiling(sketch, t):
            continue
        sp = split_step_ids(sketch, t, SPATIAL)
        rd = split_step_ids(sketch, t, REDUCE)
        if not sp or len(split_at(sketch.steps, sp[0]).lengths) != params.n_spatial_levels - 1:
            continue  # not multi-level tiled (e.g. a cross-thread reduction)
        total = spatial_and_reduce_length(stage)[0]
        group = TileGroup(t, attach_target(sketch, t), sp, rd, min(hardware.warp_size, total))
        for c, other in enumerate(sketch.stages):
            if other.scope == "shared" and other.attach is not None and other.attach[0] == t:
                fp = _footprint(sketch, t, c)
                if fp is not None:
                    group.footprints.append(fp)
        groups.append(group)
        grouped.update(sp + rd)
    tensor_core = tensor_core_groups(sketch)
    for g in tensor_core:
        grouped.update(g.split_ids)
    unknown = [
        k
        for k, s in enumerate(sketch.steps)
        if isinstance(s, SplitStep) and None in s.lengths and k not in grouped
    ]
    return SketchPlan(
        sketch,
        unknown,
        groups,
        cross_thread_splits(sketch),
        tensor_core,
        register_row_threads(sketch, params),
    )


def register_row_threads(state: State, params: SketchParams) -> dict[int, int]:
    """SplitStep id -> the fewest threads, for the thread split the rows kept in registers
    follow (`utils.row_part_in_registers`): their parts over `max_row_register_elems` (the
    parts of all the caches that follow one split, a row's and its operands', together)."""
    parts: dict[int, int] = {}
    for j in range(len(state.stages)):
        part = row_part_in_registers(state, j)
        if not part or params.max_row_register_elems < 1:
            continue
        for k, _ in splitting_steps(state, j):
            step = state.steps[k]
            if isinstance(step, FollowSplitStep):
                parts[step.src_step_id] = parts.get(step.src_step_id, 0) + part
    return {src: max(1, -(-n // params.max_row_register_elems)) for src, n in parts.items()}


__all__ = [
    "Footprint",
    "SketchPlan",
    "TileGroup",
    "cross_thread_splits",
    "make_plan",
    "register_row_threads",
]
