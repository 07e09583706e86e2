"""The CPU interpreter's warp statements on fragments of the "mma" flavour: per-lane registers,
`ldmatrix` and `mma.sync.m16n8k16` emulated as the PTX ISA defines them (`mma_layout.py`).

A fragment's storage is (warps, tiles, 32 lanes, 8 values): lane l's share of each 16x16 tile,
in the element order `mma_layout` gives (operands: register i holds values 2i and 2i + 1).

- `FragmentLoad` is one `ldmatrix.x4`: each lane gives the address of one 8-value row
  (`mma_layout.lane_row_offset`; shared memory only, 16-byte aligned), the 32 rows form four
  8x8 matrices (lanes 8i..8i+7 the rows of matrix i) and each lane receives two values of each
  matrix (`ldmatrix_element`, transposed where `ldmatrix_trans` says) into register i.
- `FragmentMma` is two mma per tile (columns 0-7 and 8-15 of the accumulator): the A, B and C
  matrices are gathered from the lanes' registers by the ISA's fragment layouts, multiplied in
  float64 and rounded once to float32, and D is scattered back the same way.
- TF32 operands (m16n8k8): a load is each lane reading its own values where the A / B layout
  puts them, rounded to TF32 (what the printed `cvt.rna.tf32.f32` does), and the mma gathers
  16x8 and 8x8 matrices by that shape's layouts.
- `FragmentStore` writes each lane's 8 accumulator values where the C layout puts them.
- `FragmentFill` sets every value of the tile.

So a load and an mma whose layouts disagree compute a wrong product here, as on the GPU.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower import mma_layout as ml
from autosched.lower.narrow_tile import narrowed
from autosched.lower.warp_context import WarpContext, fill_fragment, track_warp_read
from autosched.te.dtype import BYTES, from_storage, round_tf32, to_storage

_LANES = np.arange(ml.LANES)


@functools.cache
def _positions(table: tuple[ml.LanePosition, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of shape (32, len(table)): element e of lane l at (rows[l, e], cols[l, e])."""
    at = np.array([[p.at(lane) for p in table] for lane in range(ml.LANES)])
    return at[..., 0], at[..., 1]


@functools.cache
def _tile_positions(scope: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of shape (32, values): where each lane's value e of a tile lies."""
    values = ml.lane_values(scope, dtype)
    return _positions(tuple(ml.tile_position(scope, e, dtype) for e in range(values)))


@functools.cache
def _ldmatrix_sources(trans: bool) -> np.ndarray:
    """(32, 8): for lane l and element 2i + h, the flat index into the four 8x8 matrices (as
    (matrix, row, col)) of the value ldmatrix.x4 puts in half h of its register i."""
    out = np.zeros((ml.LANES, ml.ELEMS_PER_LANE), np.int64)
    n = ml.LDMATRIX_ROWS
    for lane in range(ml.LANES):
        for reg in range(ml.OPERAND_REGS):
            for half in range(2):
                r, c = ml.ldmatrix_element(lane, half, trans)
                out[lane, ml.operand_elem(reg, half)] = (reg * n + r) * n + c
    return out


def _check_dtype(ctx: WarpContext, frag: ir.Buffer) -> None:
    if frag.dtype not in ml.MMA_TYPES:
        ctx.fail(f"mma fragments hold {tuple(ml.MMA_TYPES)}, but {frag.name} is {frag.dtype}")


def _load(run: Any, s: ir.FragmentLoad, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    _check_dtype(ctx, s.frag)
    buf, mem, _ = ctx.memory(s.src, "read")  # scope, layout, ldm, offset and bounds checks
    if buf.dtype != s.frag.dtype:
        ctx.fail(f"loads {buf.dtype} {buf.name} into a {s.frag.dtype} fragment")
    offset = ctx.value(s.src.offset, f"the offset into {buf.name}").astype(np.int64)
    if not ml.SHAPES[s.frag.dtype].ldmatrix:
        _load_values(run, ctx, s, buf, mem, offset, arr, tiles)
        return
    lane_rows = np.array([ml.lane_row_offset(lane, s.src.layout, s.src.ldm) for lane in _LANES])
    rows = offset[:, None] + lane_rows[None, :]  # (warps, 32): each lane's row address
    misaligned = np.argwhere(rows * BYTES[buf.dtype] % ml.ROW_ALIGN_BYTES)
    if misaligned.size:
        w, lane = (int(x) for x in misaligned[0])
        ctx.fail(
            f"ldmatrix row address {int(rows[w, lane])} of {buf.name} from lane {lane} is not "
            f"{ml.ROW_ALIGN_BYTES}-byte aligned"
        )
    idx = rows[:, :, None] + np.arange(ml.LDMATRIX_ROWS)  # (warps, 32 rows, 8 values)
    lanes = np.repeat(ctx.lane0, idx[0].size)
    run._check_bounds(buf, idx.reshape(-1), lanes, "read")
    keys = (ctx.blocks[:, None, None] * buf.size + idx).reshape(-1)
    track_warp_read(run, ctx, buf, keys)
    matrices = from_storage(mem[ctx.blocks[:, None, None], idx], buf.dtype).astype(np.float32)
    trans = ml.ldmatrix_trans(s.frag.scope, s.src.layout)
    flat = matrices.reshape(len(ctx.warps), -1)  # (warps, 4 matrices x 8 rows x 8 values)
    arr[ctx.warps, tiles] = flat[:, _ldmatrix_sources(trans)]


def _load_values(run: Any, ctx: WarpContext, s: ir.FragmentLoad, buf, mem, offset, arr, tiles):
    """A TF32 load: each lane reads its own values (where the A / B layout puts them) and
    rounds them to TF32 (`cvt.rna.tf32.f32`)."""
    rows, cols = _tile_positions(s.frag.scope, s.frag.dtype)
    steps = ml.element_offset(rows, cols, s.src.layout, s.src.ldm)  # (32, values)
    idx = offset[:, None, None] + steps[None]
    keys = (ctx.blocks[:, None, None] * buf.size + idx).reshape(-1)
    track_warp_read(run, ctx, buf, keys)
    values = from_storage(mem[ctx.blocks[:, None, None], idx], buf.dtype).astype(np.float32)
    arr[ctx.warps, tiles] = round_tf32(values)


def _gather(values: np.ndarray, rows: np.ndarray, cols: np.ndarray, shape) -> np.ndarray:
    """The (warps, *shape) matrices whose element (rows[l, e], cols[l, e]) is values[:, l, e]."""
    out = np.full((values.shape[0], *shape), np.nan, np.float64)
    out[:, rows, cols] = values
    return out


def _mma(run: Any, s: ir.FragmentMma, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    (acc, acc_tiles), (a, a_tiles), (b, b_tiles) = ctx.tiles()
    if s.a.dtype != s.b.dtype:
        ctx.fail(f"multiplies {s.a.dtype} {s.a.name} by {s.b.dtype} {s.b.name}")
    _check_dtype(ctx, s.a)
    shape = ml.SHAPES[s.a.dtype]
    w = ctx.warps
    a_rows, a_cols = _positions(shape.a)
    b_rows, b_cols = _positions(shape.b)
    c_rows, c_cols = _positions(ml.C_ELEMENT)
    a_mat = _gather(a[w, a_tiles], a_rows, a_cols, (ir.WMMA_TILE, shape.k))
    before = acc[w, acc_tiles]  # (warps, 32, 8)
    after = before.copy()
    per_reg = shape.values_per_reg
    for n_half in range(ir.WMMA_TILE // ml.MMA_N):
        regs = ml.operand_b_regs(n_half)
        b_elems = [ml.operand_elem(reg, v, per_reg) for reg in regs for v in range(per_reg)]
        c_elems = list(ml.accumulator_elems(n_half))
        b_mat = _gather(b[w, b_tiles][:, :, b_elems], b_rows, b_cols, (shape.k, ml.MMA_N))
        c_mat = _gather(before[:, :, c_elems], c_rows, c_cols, (ir.WMMA_TILE, ml.MMA_N))
        d_mat = (np.matmul(a_mat, b_mat) + c_mat).astype(np.float32)
        after[:, :, c_elems] = d_mat[:, c_rows, c_cols]
    acc[w, acc_tiles] = after


def _store(run: Any, s: ir.FragmentStore, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    buf, mem, _ = ctx.memory(s.dst, "write")
    if buf.dtype != "float32" and not narrowed(buf):
        ctx.fail(f"stores a float32 accumulator into {buf.dtype} {buf.name}")
    rows, cols = _tile_positions(ir.ACCUMULATOR_SCOPE, "float32")
    steps = ml.element_offset(rows, cols, s.dst.layout, s.dst.ldm)  # (32, 8)
    offset = ctx.value(s.dst.offset, f"the offset into {buf.name}").astype(np.int64)
    idx = offset[:, None, None] + steps[None]  # (warps, 32, 8)
    vals = arr[ctx.warps, tiles]  # (warps, 32, 8): what each lane writes
    vals = to_storage(vals, buf.dtype)  # a narrowed tile's values rounded as they are stored
    lanes = (ctx.lane0[:, None, None] + _LANES[None, :, None] + 0 * idx).reshape(-1)
    run._check_bounds(buf, idx.reshape(-1), lanes, "write")
    if buf.scope == "global":
        mem[idx] = vals
        return
    keys = (ctx.blocks[:, None, None] * buf.size + idx).reshape(-1)
    run._track_write(buf, mem, keys, vals.reshape(-1), lanes, False)
    mem.reshape(-1)[keys] = vals.reshape(-1)


# the mma flavour's handler of each warp statement type (handler(run, statement, lane mask))
MMA_HANDLERS: dict[type, Any] = {
    ir.FragmentFill: fill_fragment,
    ir.FragmentLoad: _load,
    ir.FragmentStore: _store,
    ir.FragmentMma: _mma,
}

__all__ = ["MMA_HANDLERS"]
