"""What the CPU interpreter's warp statements share, whatever their fragments' flavour
(`interpret_warp.py`: wmma; `interpret_mma.py`: mma): the active warps of a statement and the
lane-uniform values of its expressions (`WarpContext`), its memory tile checked for scope,
alignment and bounds, and the race tracking of a warp's shared-memory read.

A warp is 32 consecutive thread ids of a block (`tid // 32`). Every warp with an active lane
must have all 32 lanes active (else a divergent warp op), and the 32 lanes must agree on every
expression. Shared memory accesses go through the interpreter's race tracker, the warp's lane 0
standing for the warp as writer and reader (a read records the whole warp as readers).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.te.dtype import BYTES, from_storage


@functools.cache
def layout_steps(shape: tuple[int, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per layout of ir.MATRIX_LAYOUTS (row_major, col_major), element (r, c) of a tile of
    `shape`: its offset from the tile's first element, per unit of ldm and per 1."""
    rows, cols = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    return dict(zip(ir.MATRIX_LAYOUTS, ((rows, cols), (cols, rows)), strict=True))


def active_units(run: Any, mask: Any, size: int) -> tuple[np.ndarray, int | None, int]:
    """The units of `size` consecutive threads (warps, warpgroups; global ids) with an active
    lane under `mask`, and the first unit only partly active with its active count (None, 0
    when every active unit is whole): what a collective instruction needs."""
    lanes = np.ones(run.L, bool) if mask is None else np.broadcast_to(mask, (run.L,))
    per_unit = lanes.reshape(-1, size)
    active = per_unit.any(axis=1)
    partial = np.flatnonzero(active & ~per_unit.all(axis=1))
    if partial.size:
        w = int(partial[0])
        return np.flatnonzero(active), w, int(per_unit[w].sum())
    return np.flatnonzero(active), None, 0


class WarpContext:
    """The active warps of one warp statement and the lane-uniform values of its expressions."""

    def __init__(self, run: Any, s: ir.WarpStmt, mask: Any) -> None:
        self.run, self.s = run, s
        if run.T % ir.WARP_SIZE:
            self.fail(
                f"needs whole warps, but a block has {run.T} threads (blockDim.x == {ir.WARP_SIZE})"
            )
        warps, w, count = active_units(run, mask, ir.WARP_SIZE)
        if w is not None:
            self.fail(
                f"reached by only {count} of {ir.WARP_SIZE} lanes of the warp of "
                f"{run.where(w * ir.WARP_SIZE)} (divergent warp op)"
            )
        self.warps = warps  # global warp ids
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


def track_collective_read(
    run: Any, buf: ir.Buffer, keys: np.ndarray, lanes: np.ndarray, size: int, what: str
) -> None:
    """Race checks of a shared-memory read by units of `size` threads (warps, warpgroups),
    `lanes` the first thread of the unit reading each key: what another thread wrote since the
    last barrier races; the unit's threads are recorded as readers."""
    tr = run.trackers[id(buf)]
    t = run.ix["tid"][lanes]
    if getattr(run, "tma", None) is not None:  # TMA copies not yet waited for
        run.tma.check_read(buf, keys, lanes)
    bad = tr.others(tr.wmin[keys], tr.wmax[keys], t)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        run._race(buf, int(keys[j]), int(lanes[j]), what, "wrote")
    np.minimum.at(tr.rmin, keys, t)
    np.maximum.at(tr.rmax, keys, t + size - 1)


def track_warp_read(run: Any, ctx: WarpContext, buf: ir.Buffer, keys: np.ndarray) -> None:
    """Race checks of a warp's shared-memory read (`track_collective_read`)."""
    lanes = np.repeat(ctx.lane0, keys.size // ctx.lane0.size)
    track_collective_read(run, buf, keys, lanes, ir.WARP_SIZE, "reads")


__all__ = [
    "WarpContext",
    "active_units",
    "layout_steps",
    "track_collective_read",
    "track_warp_read",
]


def fill_fragment(run: Any, s: ir.FragmentFill, mask: Any) -> None:
    """FragmentFill, for either fragment flavour: every element of the warp's tile (a 16x16
    tile, or the per-lane registers of an mma fragment) becomes the value."""
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    value = np.asarray(from_storage(ctx.value(s.value, "the fill value"), s.value.dtype))
    arr[ctx.warps, tiles] = value.astype(np.float32)[:, None, None]
