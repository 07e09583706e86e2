"""The CPU interpreter's warp-collective Tensor Core statements (`ir.WarpStmt`).

A warp is 32 consecutive thread ids of a block (`tid // 32`). Fragment buffers (scopes in
`ir.FRAGMENT_SCOPES`) are per warp: float32 arrays of shape (warps, tiles, rows, cols), the
tile shape `ir.tile_shape` (16x16; 16x8 / 8x16 for TF32 matrix_a / matrix_b), where `warps`
counts every warp of the launch; matrix_a/matrix_b values are float16/bfloat16 values held
exactly in float32, or float32 values rounded to TF32 on load (`round_tf32`, as the printed
`__float_to_tf32` after `load_matrix_sync`). Fresh fragments hold NaN.

Each warp statement first checks the warp rules (`warp_lanes`): every warp with an active lane
has all 32 lanes active (else a divergent warp op), and the 32 lanes agree on every expression;
then it runs once per active warp, vectorized over those warps with numpy. Tiles of memory are
bounds-checked and alignment-checked (offset a multiple of 32 bytes, ldm of 16 bytes); shared
memory accesses go through the interpreter's race tracker, the warp's lane 0 standing for the
warp as writer and reader (a read records the whole warp as readers).

`FragmentMma` computes `a @ b + acc` in float64 and rounds once to float32: the fp16/bf16/TF32
products are exact either way, and one rounding per mma makes the result independent of the
summation order (Tensor Cores sum in at least float32 precision, in an unspecified order).

That is the "wmma" flavour, whose fragments are opaque. Fragments of the "mma" flavour
(`ir.Buffer.fragment_flavour`) are per-lane registers in the PTX layouts; their statements run
in `interpret_mma.py`, which uses `WarpContext` from here (`register_warp_handlers` dispatches
on the statement's flavour).

The handlers take the interpreter's kernel run (`interpreter._KernelRun`) as `run`; they use its
launch indices, buffers, race trackers and error helpers.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower.dispatch import TypeTable
from autosched.te.dtype import BYTES, from_storage, round_tf32


@functools.cache
def layout_steps(shape: tuple[int, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per layout of ir.MATRIX_LAYOUTS (row_major, col_major), element (r, c) of a tile of
    `shape`: its offset from the tile's first element, per unit of ldm and per 1."""
    rows, cols = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    return dict(zip(ir.MATRIX_LAYOUTS, ((rows, cols), (cols, rows)), strict=True))


# matrix fragment dtype -> what a load does to the values it reads (float32: TF32 rounding)
LOAD_CONVERSIONS = {ir.TF32_OPERAND_DTYPE: round_tf32}


def fragment_storage(buffer: ir.Buffer, warps: int) -> np.ndarray:
    """A fresh fragment buffer for `warps` warps: NaN tiles of (warps, tiles, rows, cols), or
    of (warps, tiles, lanes, values per lane) for the mma flavour."""
    rows, cols = ir.tile_shape(buffer)
    tiles = buffer.size // (rows * cols)
    if buffer.fragment_flavour == "mma":
        return np.full(
            (warps, tiles, ir.WARP_SIZE, (rows * cols) // ir.WARP_SIZE), np.nan, np.float32
        )
    return np.full((warps, tiles, rows, cols), np.nan, np.float32)


class WarpContext:
    """The active warps of one warp statement and the lane-uniform values of its expressions."""

    def __init__(self, run: Any, s: ir.WarpStmt, mask: Any) -> None:
        self.run, self.s = run, s
        if run.T % ir.WARP_SIZE:
            self.fail(
                f"needs whole warps, but a block has {run.T} threads (blockDim.x == {ir.WARP_SIZE})"
            )
        lanes = np.ones(run.L, bool) if mask is None else np.broadcast_to(mask, (run.L,))
        per_warp = lanes.reshape(-1, ir.WARP_SIZE)
        active = per_warp.any(axis=1)
        partial = np.flatnonzero(active & ~per_warp.all(axis=1))
        if partial.size:
            w = int(partial[0])
            self.fail(
                f"reached by only {int(per_warp[w].sum())} of {ir.WARP_SIZE} lanes of the warp of "
                f"{run.where(w * ir.WARP_SIZE)} (divergent warp op)"
            )
        self.warps = np.flatnonzero(active)  # global warp ids
        self.lane0 = self.warps * ir.WARP_SIZE  # the lane standing for each warp
        self.blocks = run.ix["block"][self.lane0]
        self.mask = mask

    def fail(self, what: str) -> None:
        self.run.fail(f"{self.s.describe()} in kernel {self.run.k.name}: {what}")

    def value(self, e, what: str) -> np.ndarray:
        """`e` per active warp, checking that the 32 lanes of each warp agree."""
        got = np.broadcast_to(np.asarray(self.run.eval(e, self.mask)), (self.run.L,))
        per_warp = got.reshape(-1, ir.WARP_SIZE)[self.warps]
        differ = np.flatnonzero((per_warp != per_warp[:, :1]).any(axis=1))
        if differ.size:
            w = int(self.warps[differ[0]])
            self.fail(
                f"the lanes of the warp of {self.run.where(w * ir.WARP_SIZE)} disagree on {what}"
            )
        return per_warp[:, 0]

    def tiles(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """`tile` of each fragment operand of the statement, in order."""
        return [self.tile(*operand) for operand in self.s.fragments()]

    def tile(self, frag: ir.Buffer, e, scopes: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(fragment storage, tile number per active warp), checking scope and range."""
        if frag.scope not in scopes:
            self.fail(f"{frag.name} has scope {frag.scope}, expected one of {scopes}")
        buf, arr = self.run.bufs_of(frag)
        tiles = self.value(e, f"the tile number of {frag.name}").astype(np.int64)
        bad = np.flatnonzero((tiles < 0) | (tiles >= arr.shape[1]))
        if bad.size:
            j = int(bad[0])
            self.fail(
                f"tile {int(tiles[j])} of {frag.name} is out of range (0..{arr.shape[1] - 1}) "
                f"for the warp of {self.run.where(int(self.lane0[j]))}"
            )
        return arr, tiles

    def memory(self, m: ir.MatrixTile, what: str) -> tuple[ir.Buffer, np.ndarray, np.ndarray]:
        """(buffer, storage, element indices (warps, rows, cols)) of a memory tile of the
        shape of the statement's fragment tile, checked for scope, alignment (the flavour's:
        `ir.TILE_OFFSET_ALIGN_BYTES`) and bounds."""
        buf, arr = self.run.bufs_of(m.buffer)
        flavour = self.s.flavour()
        writes = self.s.writes_memory()
        scopes = ir.MEMORY_TILE_SCOPES if writes else ir.LOAD_TILE_SCOPES[flavour]
        if buf.scope not in scopes:
            self.fail(f"{buf.name} has scope {buf.scope}; {flavour} tiles are in {scopes} memory")
        layouts = layout_steps(ir.tile_shape(self.s.fragments()[0][0]))
        if m.layout not in layouts:
            self.fail(f"unknown layout {m.layout!r} (expected one of {ir.MATRIX_LAYOUTS})")
        steps = layouts[m.layout]
        eb = BYTES[buf.dtype]
        if m.ldm * eb % ir.LDM_ALIGN_BYTES:
            self.fail(f"ldm {m.ldm} of {buf.name} is not a multiple of {ir.LDM_ALIGN_BYTES} bytes")
        offset = self.value(m.offset, f"the offset into {buf.name}").astype(np.int64)
        align = ir.TILE_OFFSET_ALIGN_BYTES[flavour]
        bad = np.flatnonzero(offset * eb % align)
        if bad.size:
            j = int(bad[0])
            self.fail(
                f"offset {int(offset[j])} into {buf.name} is not {align}-byte "
                f"aligned for the warp of {self.run.where(int(self.lane0[j]))}"
            )
        idx = offset[:, None, None] + steps[0] * m.ldm + steps[1]
        lanes = np.repeat(self.lane0, idx[0].size)
        self.run._check_bounds(buf, idx.reshape(-1), lanes, what)
        return buf, arr, idx


def _fill(run: Any, s: ir.FragmentFill, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    value = np.asarray(from_storage(ctx.value(s.value, "the fill value"), s.value.dtype))
    arr[ctx.warps, tiles] = value.astype(np.float32)[:, None, None]


def _load(run: Any, s: ir.FragmentLoad, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    buf, mem, idx = ctx.memory(s.src, "read")
    if buf.dtype != s.frag.dtype:
        ctx.fail(f"loads {buf.dtype} {buf.name} into a {s.frag.dtype} fragment")
    if buf.scope == "global":
        vals = mem[idx]
    else:
        keys = (ctx.blocks[:, None, None] * buf.size + idx).reshape(-1)
        _track_warp_read(run, ctx, buf, keys)
        vals = mem[ctx.blocks[:, None, None], idx]
    vals = from_storage(vals, buf.dtype).astype(np.float32)
    convert = LOAD_CONVERSIONS.get(s.frag.dtype)
    arr[ctx.warps, tiles] = vals if convert is None else convert(vals)


def _track_warp_read(run: Any, ctx: WarpContext, buf: ir.Buffer, keys: np.ndarray) -> None:
    """Race checks of a warp's shared-memory read: what another thread wrote since the last
    barrier races; the warp's 32 lanes are recorded as readers."""
    tr = run.trackers[id(buf)]
    lanes = np.repeat(ctx.lane0, keys.size // ctx.lane0.size)
    t = run.ix["tid"][lanes]
    bad = tr.others(tr.wmin[keys], tr.wmax[keys], t)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        run._race(buf, int(keys[j]), int(lanes[j]), "reads", "wrote")
    np.minimum.at(tr.rmin, keys, t)
    np.maximum.at(tr.rmax, keys, t + ir.WARP_SIZE - 1)


def _store(run: Any, s: ir.FragmentStore, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    buf, mem, idx = ctx.memory(s.dst, "write")
    if buf.dtype != "float32":
        ctx.fail(f"stores a float32 accumulator into {buf.dtype} {buf.name}")
    vals = arr[ctx.warps, tiles]
    if buf.scope == "global":
        mem[idx] = vals
        return
    keys = (ctx.blocks[:, None, None] * buf.size + idx).reshape(-1)
    vals = vals.reshape(-1)
    lanes = np.repeat(ctx.lane0, keys.size // ctx.lane0.size)
    run._track_write(buf, mem, keys, vals, lanes, False)
    mem.reshape(-1)[keys] = vals


def _mma(run: Any, s: ir.FragmentMma, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    (acc, acc_tiles), (a, a_tiles), (b, b_tiles) = ctx.tiles()
    if s.a.dtype != s.b.dtype:
        ctx.fail(f"multiplies {s.a.dtype} {s.a.name} by {s.b.dtype} {s.b.name}")
    w = ctx.warps
    product = np.matmul(a[w, a_tiles].astype(np.float64), b[w, b_tiles].astype(np.float64))
    acc[w, acc_tiles] = (product + acc[w, acc_tiles]).astype(np.float32)


# the wmma flavour's handler of each warp statement type (handler(run, statement, lane mask))
WMMA_HANDLERS: dict[type, Any] = {
    ir.FragmentFill: _fill,
    ir.FragmentLoad: _load,
    ir.FragmentStore: _store,
    ir.FragmentMma: _mma,
}


def register_warp_handlers(table: TypeTable[ir.Stmt, [Any], None], run: Any) -> None:
    """Register the warp statements' handlers, bound to the kernel run `run`, in its
    statement table (statement, lane mask): each runs the handler of the statement's flavour."""
    from autosched.lower.interpret_mma import MMA_HANDLERS  # it builds on WarpContext

    by_flavour = {"wmma": WMMA_HANDLERS, "mma": MMA_HANDLERS}

    def handle(s: ir.WarpStmt, mask: Any) -> None:
        by_flavour[s.flavour()][type(s)](run, s, mask)

    for stmt_type in WMMA_HANDLERS:
        table.register(stmt_type, handle)


__all__ = ["WMMA_HANDLERS", "WarpContext", "fragment_storage", "register_warp_handlers"]
