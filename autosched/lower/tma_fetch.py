"""TMA-fed wgmma pipelines: the shared operand tiles of a pipelined wgmma loop copied by one
thread's tensor memory accelerator (TMA) box copies instead of every thread's cp.async.

A shared stage marked `operand_copy == "tma"` (`State.operand_copy`) is fetched by TMA where
lowering can prove that a box copy stores exactly what the cooperative fetch would
(`stage_boxes`):

- the stage is double-buffered at a serial loop (a pipeline of S >= 2 slots) that no other
  loop of more than one iteration encloses (its mbarriers are initialised once per block);
- wgmmas read it in the 128B-swizzled layout (`wgmma_operands.swizzle_of`: rows are whole,
  unpadded 128-byte lines, K-major or an N-major B), its storage is exactly its region, and its
  dimensions other than the tile's two have extent 1;
- its body copies a global param element for element (`A[ax0, ax1, ...]`, no cast or padding
  stage inlined), so the tile is the box of the param at the region's origin; or it is the
  gather of a 1x1, stride-1 implicit GEMM over an NHWC input, whose flattened row index the
  arithmetic proves to be the tile's row (`_flattened`), so the tile is a box of the input
  seen as [N*H*W, C] (`TensorMap.view`); that origin depends on block indices and loops only
  (no thread index), and the tensor map is one the driver accepts (`TensorMap.problem`).

The tile is then one box per 64-element atom of its contiguous dimension (`SWIZZLE_COLUMNS`), R
rows x 64 columns landing at atom j's place (R * 64 j elements into the slot): the copy
engine's 128B swizzle is the layout the descriptors read. TMA reads zeros past the tensor's
edges, which is what the cooperative fetch stores past K and what no valid output reads past M
or N, so an edge tile needs no guard; the copy-out keeps its own.

Every stage fetched at the loop must qualify, else the loop keeps its cp.async pipeline (the
mark is then a no-op, never an error). A qualifying loop of S slots becomes
(`emit_tma_pipeline`):

    mbarrier.init(full[0 .. S-1], 1); barrier
    for t < S - 1: issue(t)
    for k:  mbarrier wait full[k % S], parity (k / S) % 2     (tile k landed)
            compute on slot k % S
            barrier                                           (every reader of slot k - 1 is done)
            if k + S - 1 < K: issue(k + S - 1)                (into slot (k - 1) % S)
    barrier

with issue(t) thread 0's `mbarrier.arrive.expect_tx(full[t % S], bytes of every box)` and its
box copies of tile t. The `warpgroup_mma` pass then makes the computation the step's wgmmas and
keeps one group in flight (`overlapped_tma_loop`): `wgmma.wait_group 1` before the barrier
retires step k - 1's, whose slot the refill overwrites (tma_ir.py: releasing a slot).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from autosched.lower import ir, stmt_walk
from autosched.lower import tma_ir as ti
from autosched.lower import wgmma_ir as wi
from autosched.lower.arith import simplify
from autosched.lower.digit_folding import fold_digits
from autosched.lower.double_buffer import in_slot, is_double_buffered, slots
from autosched.lower.ir import I32, THREAD_TAGS, THREAD_VARS, int32
from autosched.lower.plan import NO_LOOP_TAGS, LoweringPlan
from autosched.lower.tma_im2col import im2col_gather
from autosched.lower.wgmma_mainloop import IN_FLIGHT
from autosched.lower.wgmma_operands import SWIZZLE_COLUMNS, tile_dims
from autosched.schedule.stage import ROOT
from autosched.te.expr import BinOp, Const, Expr, Load, Var
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import free_vars, substitute

TMA = "tma"  # `Stage.operand_copy` of a stage fetched by TMA
_THREAD_INDICES = frozenset(id(THREAD_VARS[tag]) for tag in THREAD_TAGS)


@dataclass(frozen=True)
class StageBoxes:
    """The box copies that fill one slot of a shared stage: `boxes` holds, per copy, its
    element offset in the slot and its origin in the param (the buffer's dimension order, in
    the plan's context variables)."""

    stage: int
    map: ti.TensorMap
    boxes: tuple[tuple[int, tuple[Expr, ...]], ...]
    shifts: tuple[Expr, ...] = ()  # an im2col map's offsets (the filter tap), every box's

    @property
    def bytes(self) -> int:
        return len(self.boxes) * self.map.box_bytes


@dataclass(frozen=True)
class _Source:
    """The param a shared stage copies and the shape its tile is a box of (None: its own)."""

    param: ir.Buffer
    view: tuple[int, ...] | None = None


def _copied_param(plan: LoweringPlan, j: int, rows_at: int, cols_at: int) -> _Source | None:
    """What shared stage j copies element for element, if its body is such a copy: a global
    param read at the stage's own indices (`A[ax0, ax1, ...]`), or one whose last dimension
    the tile's columns read and whose other dimensions, flattened, its rows (an NHWC input
    gathered by a 1x1, stride-1 implicit GEMM: `data[m / HW, m / W % H + ry, m % W + rx, rc]`
    with ry = rx = 0 is row m of data seen as [N*H*W, C])."""
    body, axes = plan.info[j].body, plan.compute_op(j).axis
    if not isinstance(body, Load) or not isinstance(body.buffer, Tensor) or any(a.lo for a in axes):
        return None
    src = plan.producer_stage[id(body.buffer.op)]
    if not plan.stages[src].is_placeholder or plan.stages[src].compute_at != ROOT:
        return None
    param = plan.info[src].buf
    if param.scope != "global" or param.dtype != body.dtype:
        return None
    if len(body.indices) == len(axes) and all(
        i is a for i, a in zip(body.indices, axes, strict=True)
    ):
        return _Source(param)
    return _flattened(param, body.indices, axes, rows_at, cols_at)


def _flattened(param: ir.Buffer, indices, axes, rows_at: int, cols_at: int) -> _Source | None:
    """`param` seen as [rows, C] where `indices` read row `axes[rows_at]`, column
    `axes[cols_at]` of that view (`rows_view`); None where that does not hold."""
    view = rows_view(tuple(param.shape), indices, axes, rows_at, cols_at)
    return None if view is None else _Source(param, view)


def rows_view(
    shape: tuple[int, ...], indices, axes, rows_at: int, cols_at: int
) -> tuple[int, int] | None:
    """The view [rows, C] of a tensor of `shape` (its leading dimensions flattened) whose row
    `axes[rows_at]`, column `axes[cols_at]` the load `indices` read (every other axis at 0: an
    extent-1 window), or None where that does not hold for every row of the view: a 1x1,
    stride-1 implicit GEMM's gather `data[m / HW, m / W % H + ry, m % W + rx, rc]` is row m of
    its NHWC input seen as [N*H*W, C]."""
    if len(shape) < 2 or indices[-1] is not axes[cols_at]:
        return None
    rows = math.prod(shape[:-1])
    at_zero = {a: int32(0) for d, a in enumerate(axes) if d not in (rows_at, cols_at)}
    row: Expr = int32(0)
    for d, index in enumerate(indices[:-1]):
        row = row + substitute(index, at_zero) * int32(math.prod(shape[d + 1 : -1]))
    bounds = {id(axes[rows_at]): (0, rows - 1)}
    difference = fold_digits(simplify(row - axes[rows_at], bounds), bounds)
    difference = simplify(difference, bounds)
    if not (isinstance(difference, Const) and difference.value == 0):
        return None
    return rows, shape[-1]


def _runs_once_per_block(plan: LoweringPlan, j: int) -> bool:
    """Whether the loop stage j is attached at is entered once per block: every loop around it
    is a launch index or runs once."""
    attach = plan.attach_point(j)
    for target, name in plan.info[j].context:
        if (target, name) == attach:
            continue
        if plan.annotation((target, name)) not in NO_LOOP_TAGS and plan.info[target].ext[name] > 1:
            return False
    return True


def stage_boxes(plan: LoweringPlan, j: int) -> StageBoxes | None:
    """The box copies that fill a slot of shared stage j, or None where a TMA fetch cannot be
    proven to store what the cooperative fetch does (see the module docstring)."""
    st, inf = plan.stages[j], plan.info[j]
    if st.operand_copy != TMA or plan.wgmma_stages.get(j) != "128B":
        return None
    if not is_double_buffered(plan, j) or not _runs_once_per_block(plan, j):
        return None
    shape = inf.buf.shape[1:]  # past the slots
    if shape != tuple(inf.region) or len(inf.base) != len(shape):
        return None
    rows_at, cols_at = tile_dims(shape, st.name)
    if any(n != 1 for d, n in enumerate(shape) if d not in (rows_at, cols_at)):
        return None
    rows, cols = shape[rows_at], shape[cols_at]
    if cols % SWIZZLE_COLUMNS:
        return None
    if any(id(v) in _THREAD_INDICES for b in inf.base for v in free_vars(b)):
        return None
    source = _copied_param(plan, j, rows_at, cols_at)
    if source is None:
        return _im2col_boxes(plan, j, rows_at, cols_at)
    base = list(inf.base)
    box = tuple(SWIZZLE_COLUMNS if d == cols_at else n for d, n in enumerate(shape))
    if source.view is not None:  # rows x 64 of the [rows, C] view, at the tile's origin
        base, box, cols_at = [base[rows_at], base[cols_at]], (rows, SWIZZLE_COLUMNS), 1
    tensor_map = ti.TensorMap(source.param, box, "128B", source.view)
    if tensor_map.problem():
        return None
    boxes = []
    for atom in range(cols // SWIZZLE_COLUMNS):
        origin = list(base)
        origin[cols_at] = BinOp("+", origin[cols_at], int32(atom * SWIZZLE_COLUMNS), I32)
        boxes.append((atom * rows * SWIZZLE_COLUMNS, tuple(origin)))
    return StageBoxes(j, tensor_map, tuple(boxes))


def _im2col_boxes(plan: LoweringPlan, j: int, rows_at: int, cols_at: int) -> StageBoxes | None:
    """The im2col copies that fill a slot of shared stage j where it copies an NHWC
    convolution's gather (`tma_im2col.im2col_gather`) of tiles (pixels, 1, 1, channels): one
    copy of rows x 64 channels per atom, at the tile's first pixel, offset by its tap."""
    body = plan.compute_op(j).body
    if not isinstance(body, Load) or not isinstance(body.buffer, Tensor):
        return None
    gather = body.buffer.op
    if not isinstance(gather, ComputeOp) or (rows_at, cols_at) != (0, 3):
        return None
    found = im2col_gather(gather)
    if found is None or any(a.lo for a in plan.compute_op(j).axis):
        return None
    if not all(i is a for i, a in zip(body.indices, plan.compute_op(j).axis, strict=True)):
        return None
    src = plan.producer_stage[id(found.data.op)]
    if plan.stages[src].compute_at != ROOT:
        return None
    param = plan.info[src].buf
    if param.scope != "global" or param.dtype != body.dtype:
        return None
    inf = plan.info[j]
    rows = inf.buf.shape[1 + rows_at]
    tensor_map = ti.TensorMap(param, (rows, SWIZZLE_COLUMNS), "128B", im2col=found.mode())
    if tensor_map.problem():
        return None
    m, ry, rx, channel = inf.base
    boxes = []
    for atom in range(inf.buf.shape[1 + cols_at] // SWIZZLE_COLUMNS):
        first = BinOp("+", channel, int32(atom * SWIZZLE_COLUMNS), I32)
        boxes.append((atom * rows * SWIZZLE_COLUMNS, found.coords(m, first)))
    return StageBoxes(j, tensor_map, tuple(boxes), (ry, rx))


def tma_boxes(plan: LoweringPlan, fetched: list[int]) -> list[StageBoxes] | None:
    """The box copies of every stage `fetched` at one loop, or None unless all qualify."""
    out = [stage_boxes(plan, j) for j in fetched]
    if not out or any(b is None for b in out):
        return None
    return [b for b in out if b is not None]


def emit_tma_pipeline(
    plan: LoweringPlan,
    loop_var: Var,
    extent: int,
    kind: str,
    fetched: list[int],
    rest: list[ir.Stmt],
    body: ir.Stmt,
) -> ir.Stmt | None:
    """The loop `for loop_var < extent` (of `kind`) whose stages `fetched` are filled by TMA,
    S - 1 tiles ahead (the module docstring's form), around the other attached stages `rest`
    and the loop's `body`; None where a stage does not qualify (`tma_boxes`)."""
    copies = tma_boxes(plan, fetched)
    counts = {slots(plan, j) for j in fetched}
    if copies is None or len(counts) != 1:
        return None
    (count,) = counts
    first = plan.stages[fetched[0]].name
    bars = ir.Buffer(plan.unique_name(f"{first}_full"), (count,), ti.MBARRIER_DTYPE, "shared")
    plan.extra_allocs.setdefault(fetched[0], []).append(bars)
    tx_bytes = sum(c.bytes for c in copies)

    def issue(tile: Expr) -> ir.Stmt:
        slot = BinOp("floormod", tile, int32(count), I32)
        out: list[ir.Stmt] = [ti.MbarrierExpectTx(bars, slot, tx_bytes)]
        for c in copies:
            dst = plan.info[c.stage].buf
            slot_base = BinOp("*", slot, int32(dst.size // count), I32)
            shifts = tuple(substitute(e, {loop_var: tile}) for e in c.shifts)
            for offset, origin in c.boxes:
                coords = tuple(substitute(e, {loop_var: tile}) for e in origin)
                at = BinOp("+", slot_base, int32(offset), I32)
                out.append(ti.TmaLoad(c.map, dst, at, coords, bars, slot, shifts))
        return ir.seq(out)

    ahead_by = count - 1
    following = BinOp("+", loop_var, int32(ahead_by), I32)
    refill = ir.guarded(issue(following), [BinOp("<", following, int32(extent), "bool")])
    slot = BinOp("floormod", loop_var, int32(count), I32)
    lap = BinOp("floordiv", loop_var, int32(count), I32)
    parity = BinOp("floormod", lap, int32(2), I32)
    compute = in_slot(plan, fetched, count, ir.seq([*rest, body]), loop_var)
    step = [ti.MbarrierWait(bars, slot, parity), compute, ir.Barrier(), refill]
    loop = ir.For(loop_var, extent, kind, ir.seq(step))
    prologue = [issue(int32(t)) for t in range(min(ahead_by, extent))]
    init = [ti.MbarrierInit(bars, 1), ir.Barrier()]
    return ir.seq([*init, *prologue, loop, ir.Barrier()])


def overlapped_tma_loop(loop: ir.For, rewrite: Callable[[ir.Stmt], ir.Stmt]) -> ir.Stmt | None:
    """A TMA pipeline's loop (`emit_tma_pipeline`) with its computation's products made wgmmas
    by `rewrite` and one group of them kept in flight across the slot's release:

        mbarrier wait; wgmma.fence; wgmmas; wgmma.commit_group; wgmma.wait_group 1;
        barrier; refill

    then `wgmma.wait_group 0` after the loop. None for any other loop."""
    stmts = stmt_walk.statements(loop.body)
    if len(stmts) < 4 or not isinstance(stmts[0], ti.MbarrierWait):
        return None
    *compute, barrier, refill = stmts[1:]
    if not isinstance(barrier, ir.Barrier) or not _is_refill(refill):
        return None
    syncs = (ir.Barrier, ir.AsyncCommit, ir.AsyncWait, ti.TmaStmt, wi.WgmmaWait)
    if any(isinstance(x, syncs) for c in compute for x in ir.iter_stmts(c)):
        return None
    issued = rewrite(ir.seq(compute))
    top = stmt_walk.statements(issued)
    if not any(isinstance(x, wi.WgmmaCommit) for x in top):
        return None
    body = [stmts[0], issued, wi.WgmmaWait(IN_FLIGHT), barrier, refill]
    out = ir.For(loop.var, loop.extent, loop.kind, ir.seq(body))
    return ir.seq([out, wi.WgmmaWait(0)])


def _is_refill(s: ir.Stmt) -> bool:
    """Whether `s` is a guarded issue of TMA copies (the refill of `emit_tma_pipeline`)."""
    if not isinstance(s, ir.IfThenElse) or s.else_case is not None:
        return False
    issue = (ir.Seq, ti.MbarrierExpectTx, ti.TmaLoad)
    return all(isinstance(x, issue) for x in ir.iter_stmts(s.then_case))


__all__ = [
    "TMA",
    "StageBoxes",
    "emit_tma_pipeline",
    "overlapped_tma_loop",
    "rows_view",
    "stage_boxes",
    "tma_boxes",
]
