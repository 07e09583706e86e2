"""The Tensor Core stages of a sketch (tensor_core.py), found once per sketch for its plan.

`tensor_core_groups(sketch)` finds each Tensor Core stage's unknown splits: the copy-out stage's
M and N splits [warps, repeats, 16] and the accumulator's K split [chunk, 16], with what the
init rule `FillTensorCore` (tensor_core_init.py) must fit its draws to: the extents in 16-wide
tiles (`padded_tiles`), the shared operand stages and the matrix axis of their rows.
`make_plan` keeps these splits from FillTileSize, and ThreadBind leaves the kernel's root alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autosched.lower import ir
from autosched.lower.tma_fetch import rows_view
from autosched.lower.tma_im2col import im2col_gather
from autosched.schedule.implicit_gemm import IMPLICIT_GEMM_ORIGIN
from autosched.schedule.loop_state import State
from autosched.schedule.stage import REDUCE, SPATIAL, FuseRel
from autosched.schedule.steps import SplitStep
from autosched.sketch.stage_steps import split_at, split_extent, split_step_ids
from autosched.sketch.tensor_core import MMA
from autosched.sketch.utils import attach_target
from autosched.te.dtype import BYTES
from autosched.te.expr import Load
from autosched.te.tensor import PlaceholderOp, Tensor

ROWS, IM2COL = "rows", "im2col"  # how TMA copies a gather (`TensorCoreGroup.gather_copies`)
# the matrix axes of a fragment's (row, col) dimensions, by its scope
MATRIX_AXES = {"wmma.matrix_a": ("m", "k"), "wmma.matrix_b": ("k", "n")}


@dataclass(frozen=True)
class TensorCoreGroup:
    """One Tensor Core stage of a sketch: its stages, its unknown splits and what the draws
    must fit (extents in 16-wide tiles, operand element bytes)."""

    root: int  # the kernel's root stage (the epilogue, or the copy-out stage)
    store: int  # the copy-out stage (tensorized store)
    acc: int  # the accumulator stage
    m_split: int  # step ids
    n_split: int
    k_split: int
    shared: tuple[int, ...]  # the shared operand stages, fetched cooperatively
    roles: tuple[str, ...]  # per shared stage: the scope of the fragment it feeds
    row_axes: tuple[str | None, ...]  # per shared stage: the matrix axis of its last dimension
    tiles: tuple[int, int, int]  # M / 16, N / 16, K / 16 (`padded_tiles`)
    operand_bytes: int
    epilogue: bool  # the accumulators reach the output through shared memory
    k_tile: int = MMA  # the wmma shape's K (8 for TF32): the inner length of the K split
    held: tuple[int, int] = (0, 0)  # M, N tiles that hold elements: extent / 16 rounded up
    # per shared stage: it gathers an implicit GEMM's pixels (a predicate and an address to
    # compute per fetched vector)
    gathers: tuple[bool, ...] = ()
    # per shared stage: how TMA may copy its gather (`_gather_copy`): "rows" of the input seen
    # as [pixels, channels], "im2col" copies pipelined over one loop, or "" (not at all)
    gather_copies: tuple[str, ...] = ()
    # the filter taps the shared stages' loop runs over besides K's tiles: the window extents
    # fused into it (`tensor_core._tile_accumulator`'s window-fused sketch), else 1
    window_steps: int = 1
    # the step id of the epilogue's split of its fused tile loop into 32 lanes (`lanes_split`;
    # None without an epilogue): where EpilogueVector inserts its vector split
    lanes: int | None = None

    @property
    def split_ids(self) -> tuple[int, int, int]:
        return (self.m_split, self.n_split, self.k_split)

    @property
    def vector_ok(self) -> tuple[bool, ...]:
        """Per shared stage: its rows are contiguous runs of 16 (a 16-tiled last dimension),
        which vectors and row padding fit."""
        return tuple(a is not None for a in self.row_axes)


def _unknown_splits(sketch: State, i: int, kind: str) -> list[int]:
    return [k for k in split_step_ids(sketch, i, kind) if None in split_at(sketch.steps, k).lengths]


def _fragment_of(sketch: State, shared: int):
    """The fragment stage that reads shared stage `shared`."""
    op = sketch.stages[shared].op
    for s in sketch.stages:
        body = getattr(s.op, "body", None)
        if isinstance(body, Load) and getattr(body.buffer, "op", None) is op:
            return s
    return None


def _row_axis(sketch: State, shared: int) -> str | None:
    """The matrix axis ("m", "n" or "k") held by shared stage `shared`'s last dimension, from
    the fragment stage reading it (its two innermost iterators are the 16s of its row and
    column dimensions); None when the last dimension is not one of them."""
    frag = _fragment_of(sketch, shared)
    if frag is None or frag.scope not in MATRIX_AXES:
        return None
    dims = [it.name.removesuffix("_i") for it in frag.iters[-2:]]
    last = f"ax{len(sketch.stages[shared].axes) - 1}"
    return dict(zip(dims, MATRIX_AXES[frag.scope], strict=True)).get(last)


def _gathers(sketch: State, shared: int) -> bool:
    """Whether shared stage `shared` copies an implicit GEMM's gather (`<name>.im2col`)."""
    body = getattr(sketch.stages[shared].op, "body", None)
    if not isinstance(body, Load):
        return False
    src = getattr(body.buffer, "op", None)
    return any(s.op is src and s.origin == IMPLICIT_GEMM_ORIGIN for s in sketch.stages)


def _gather_copy(sketch: State, shared: int) -> str:
    """How TMA may copy shared stage `shared` where it copies an implicit GEMM's gather:
    "rows" where the gather reads rows of its input, a placeholder, seen as [pixels, channels]
    (a 1x1, stride-1 conv without padding: `tma_fetch.rows_view`), "im2col" where it is an NHWC
    conv's gather (`tma_im2col.im2col_gather`) and no other repeated reduction loop encloses
    the stage's loop (a 1x1's channel loop, or the window-fused loop of a 3x3: one pipeline),
    else "" (also for a stage that gathers nothing)."""
    if not _gathers(sketch, shared):
        return ""
    gather = sketch.stages[shared].op.body.buffer.op  # type: ignore[attr-defined]
    load = gather.body
    if not isinstance(load, Load) or not isinstance(load.buffer, Tensor):
        return ""
    axes = gather.axis
    if isinstance(load.buffer.op, PlaceholderOp):
        shape = tuple(int(n) for n in load.buffer.shape)
        if rows_view(shape, load.indices, axes, 0, len(axes) - 1) is not None:
            return ROWS
    if im2col_gather(gather) is None:
        return ""
    acc, loop = sketch.stages[shared].attach  # type: ignore[misc]
    iters = sketch.stages[acc].iters
    at = [it.name for it in iters].index(loop)
    enclosed = any(it.kind == REDUCE and it.extent != 1 for it in iters[:at])
    return "" if enclosed else IM2COL


def _window_steps(sketch: State, acc: int, shared: tuple[int, ...]) -> int:
    """The product of the window extents fused into the loop stage `shared[0]` attaches at."""
    attach = sketch.stages[shared[0]].attach if shared else None
    if attach is None:
        return 1
    extents = {it.name: it.extent for it in sketch.stages[acc].root_iters}
    for rel in sketch.stages[acc].relations:
        if isinstance(rel, FuseRel) and rel.fused == attach[1]:
            return math.prod(extents.get(c) or 1 for c in rel.children)
    return 1


def lanes_split(sketch: State, root: int) -> int | None:
    """The step id of the epilogue's split of its fused tile loop into 32 lanes: the one
    SplitStep on the root stage of a Tensor Core sketch (its tiles follow the product's splits),
    else None."""
    ids = [k for k, s in enumerate(sketch.steps) if type(s) is SplitStep and s.stage_id == root]
    return ids[0] if len(ids) == 1 else None


def padded_tiles(extent: int) -> int:
    """The 16-wide tiles an axis is drawn for: extent / 16, or for an extent that is not a
    multiple of 16 (a padded axis: whole tiles past its edge) its next even number of tiles,
    so that 2, 4 or 8 warps and repeats still divide it (1000 -> 64, not the 63 of 1008)."""
    tiles = -(-extent // MMA)
    return tiles if extent % MMA == 0 else tiles + tiles % 2


def tensor_core_groups(sketch: State) -> list[TensorCoreGroup]:
    """The Tensor Core stages of a sketch (empty for every other sketch)."""
    out = []
    for acc, stage in enumerate(sketch.stages):
        if stage.scope != ir.ACCUMULATOR_SCOPE or stage.attach is None:
            continue
        store = stage.attach[0]
        root = attach_target(sketch, store)
        sp, rd = _unknown_splits(sketch, store, SPATIAL), _unknown_splits(sketch, acc, REDUCE)
        if len(sp) != 2 or len(rd) != 1:
            continue
        shared = tuple(
            c
            for c, s in enumerate(sketch.stages)
            if s.scope == "shared" and s.attach is not None and s.attach[0] == acc
        )
        steps = sketch.steps
        out.append(
            TensorCoreGroup(
                root=root,
                store=store,
                acc=acc,
                m_split=sp[0],
                n_split=sp[1],
                k_split=rd[0],
                shared=shared,
                roles=tuple(_fragment_of(sketch, c).scope for c in shared),
                row_axes=tuple(_row_axis(sketch, c) for c in shared),
                tiles=(
                    padded_tiles(split_extent(steps, sp[0])),
                    padded_tiles(split_extent(steps, sp[1])),
                    padded_tiles(split_extent(steps, rd[0])),
                ),
                operand_bytes=max((BYTES[sketch.stages[c].op.dtype] for c in shared), default=2),
                epilogue=root != store,
                k_tile=split_at(steps, rd[0]).lengths[-1],
                held=(-(-split_extent(steps, sp[0]) // MMA), -(-split_extent(steps, sp[1]) // MMA)),
                gathers=tuple(_gathers(sketch, c) for c in shared),
                gather_copies=tuple(_gather_copy(sketch, c) for c in shared),
                window_steps=_window_steps(sketch, acc, shared),
                lanes=lanes_split(sketch, root) if root != store else None,
            )
        )
    return out


__all__ = ["IM2COL", "MATRIX_AXES", "ROWS", "TensorCoreGroup", "padded_tiles", "tensor_core_groups"]
__all__ = ["MATRIX_AXES", "TensorCoreGroup", "lanes_split", "padded_tiles", "tensor_core_groups"]
