"""The CPU interpreter's warpgroup statements (`lower/wgmma_ir.py`): wgmma as the PTX ISA
defines it (`wgmma_layout.py`).

A warpgroup is 128 consecutive thread ids of a block (`tid // 128`). Its accumulators are
(warpgroups, tiles, 128 threads, N / 2 values): thread t's registers, value i at the position
`accumulator_position(t, i)` of the 64 x N tile. Every warpgroup with an active thread must have
all 128 active, and they must agree on every expression of the statement.

- `WgmmaMma` encodes each operand's descriptor from the tile's shared address (the buffer's
  start is address 0: the printer aligns it to its swizzle pattern) with `wgmma_layout.encode`,
  decodes it as the hardware does and gathers the 64 x 16 A and N x 16 B from the addresses the
  descriptor gives (`element_address`): a wrong LBO, SBO, major-ness or swizzle reads wrong
  elements. The operation is then only queued in the warpgroup's open group: `WgmmaCommit`
  closes the group, `WgmmaWait(n)` completes every group but the newest n, in order,
  computing `A @ B + acc` in float64 rounded once to float32 into the registers.
- Asynchrony is enforced: reading or writing an accumulator tile that a queued wgmma writes
  (`WgmmaStore`, `WgmmaFill`), or changing a shared operand before the wgmma that reads it
  completes, is an error, as is a wgmma on an accumulator written by other instructions since the
  warpgroup's last `WgmmaFence` (or never fenced).
- Shared memory: a wgmma's read goes through the race tracker (another thread's write since the
  last barrier races), and an element written by an ordinary store must have been fenced by its
  writer (`ProxyFence`) before the wgmma reads it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.dispatch import TypeTable
from autosched.te.dtype import BYTES, from_storage

G = wl.WARPGROUP_THREADS


def accumulator_storage(buffer: ir.Buffer, lanes: int) -> np.ndarray:
    """A fresh warpgroup accumulator for a launch of `lanes` threads: NaN registers of
    (warpgroups, tiles, 128, N / 2)."""
    tiles, n = buffer.size // (wl.M * buffer.shape[-1]), buffer.shape[-1]
    return np.full((-(-lanes // G), tiles, G, n // 2), np.nan, np.float32)


@functools.cache
def _positions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of shape (128, N / 2): where each thread's value i of a tile lies."""
    t, i = np.meshgrid(np.arange(G), np.arange(n // 2), indexing="ij")
    return wl.accumulator_position(t, i)


@dataclass
class _Pending:
    """One queued wgmma of one warpgroup: its accumulator tile and operand snapshots."""

    stmt: wi.WgmmaMma
    acc: np.ndarray
    tile: int
    a: np.ndarray  # (64, 16) values read at issue
    b: np.ndarray  # (N, 16)
    reread: Any  # () -> (a, b) as shared memory holds them now


@dataclass
class _WarpgroupQueues:
    """A warpgroup's open group and its committed, incomplete groups."""

    open: list[_Pending] = field(default_factory=list)
    committed: list[list[_Pending]] = field(default_factory=list)

    def pending(self):
        yield from self.open
        for group in self.committed:
            yield from group


class WgmmaRun:
    """The warpgroup statements of one kernel run (`interpreter._KernelRun`)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.queues: dict[int, _WarpgroupQueues] = {}
        self.fenced: set[tuple[int, int]] = set()  # (id(accumulator), warpgroup)
        # per shared buffer: writer thread id + 1 of an ordinary store not yet proxy-fenced
        self.unfenced: dict[int, np.ndarray] = {}

    # ---- shared context -------------------------------------------------------------------
    def fail(self, s: Any, what: str) -> None:
        self.run.fail(f"{s.describe()} in kernel {self.run.k.name}: {what}")

    def groups(self, s: Any, mask: Any) -> np.ndarray:
        """The warpgroups (global ids) running `s`, checked to be whole."""
        run = self.run
        if run.T % G or run.k.block[0] != ir.WARP_SIZE:
            self.fail(s, f"needs blockDim.x == 32 and whole warpgroups ({run.k.block} threads)")
        lanes = np.ones(run.L, bool) if mask is None else np.broadcast_to(mask, (run.L,))
        per = lanes.reshape(-1, G)
        active = per.any(axis=1)
        partial = np.flatnonzero(active & ~per.all(axis=1))
        if partial.size:
            w = int(partial[0])
            self.fail(
                s,
                f"reached by {int(per[w].sum())} of {G} threads of the warpgroup of "
                f"{run.where(w * G)} (divergent warpgroup op)",
            )
        return np.flatnonzero(active)

    def value(self, s: Any, e: Any, groups: np.ndarray, mask: Any, what: str) -> np.ndarray:
        """`e` per warpgroup, checking that its 128 threads agree."""
        run = self.run
        got = np.broadcast_to(np.asarray(run.eval(e, mask)), (run.L,)).reshape(-1, G)[groups]
        differ = np.flatnonzero((got != got[:, :1]).any(axis=1))
        if differ.size:
            w = int(groups[differ[0]])
            self.fail(s, f"the threads of the warpgroup of {run.where(w * G)} disagree on {what}")
        return got[:, 0]

    def accumulator(self, s: Any, acc: ir.Buffer, tile, groups, mask) -> tuple[np.ndarray, Any]:
        if acc.scope != ir.ACCUMULATOR_SCOPE or acc.fragment_flavour != ir.WGMMA_FLAVOUR:
            self.fail(s, f"{acc.name} is no warpgroup accumulator ({acc.scope})")
        if acc.shape[-1] not in wl.VALID_N or acc.dtype != "float32":
            self.fail(
                s,
                f"{acc.name}: N = {acc.shape[-1]} {acc.dtype}; wgmma takes float32, "
                f"N a multiple of {wl.N_STEP} up to {wl.N_MAX}",
            )
        _, arr = self.run.bufs_of(acc)
        tiles = self.value(s, tile, groups, mask, f"the tile number of {acc.name}").astype(int)
        bad = np.flatnonzero((tiles < 0) | (tiles >= arr.shape[1]))
        if bad.size:
            self.fail(s, f"tile {int(tiles[bad[0]])} of {acc.name} is out of range")
        return arr, tiles

    def check_not_in_flight(self, s: Any, acc: ir.Buffer, groups, tiles) -> None:
        for g, t in zip(groups, tiles, strict=True):
            q = self.queues.get(int(g))
            if q and any(p.stmt.acc is acc and p.tile == t for p in q.pending()):
                self.fail(
                    s,
                    f"accesses tile {int(t)} of {acc.name} while a wgmma writing it is in flight "
                    "(no wgmma.wait_group covers it)",
                )

    # ---- statements -----------------------------------------------------------------------
    def fill(self, s: wi.WgmmaFill, mask: Any) -> None:
        groups = self.groups(s, mask)
        arr, tiles = self.accumulator(s, s.acc, s.tile, groups, mask)
        self.check_not_in_flight(s, s.acc, groups, tiles)
        value = self.value(s, s.value, groups, mask, "the fill value").astype(np.float32)
        arr[groups, tiles] = value[:, None, None]
        self.fenced -= {(id(s.acc), int(g)) for g in groups}

    def fence(self, s: wi.WgmmaFence, mask: Any) -> None:
        groups = self.groups(s, mask)
        accs = [b for b in self.run.k.allocs if b.fragment_flavour == ir.WGMMA_FLAVOUR]
        self.fenced |= {(id(b), int(g)) for b in accs for g in groups}

    def mma(self, s: wi.WgmmaMma, mask: Any) -> None:
        groups = self.groups(s, mask)
        arr, tiles = self.accumulator(s, s.acc, s.acc_tile, groups, mask)
        if s.a.buffer.dtype != s.b.buffer.dtype or s.a.buffer.dtype not in wl.TYPES:
            self.fail(
                s,
                f"multiplies {s.a.buffer.dtype} by {s.b.buffer.dtype}; wgmma takes "
                f"{tuple(wl.TYPES)} pairs",
            )
        for g in groups:
            if (id(s.acc), int(g)) not in self.fenced:
                self.fail(
                    s,
                    f"{s.acc.name} was written by other instructions since the warpgroup of "
                    f"{self.run.where(int(g) * G)} last ran wgmma.fence",
                )
        a_idx = self.operand(s, s.a, wl.M, groups, mask)  # (groups, 64, 16)
        b_idx = self.operand(s, s.b, s.n, groups, mask)  # (groups, N, 16)
        a_now, b_now = (
            self.read(s, s.a.buffer, a_idx, groups),
            self.read(s, s.b.buffer, b_idx, groups),
        )
        for j, g in enumerate(groups):
            q = self.queues.setdefault(int(g), _WarpgroupQueues())

            def reread(j=j, g=g) -> tuple[np.ndarray, np.ndarray]:
                one = np.array([g])
                return (
                    self.read(s, s.a.buffer, a_idx[j : j + 1], one, track=False)[0],
                    self.read(s, s.b.buffer, b_idx[j : j + 1], one, track=False)[0],
                )

            q.open.append(_Pending(s, arr, int(tiles[j]), a_now[j], b_now[j], reread))

    def commit(self, s: wi.WgmmaCommit, mask: Any) -> None:
        for g in self.groups(s, mask):
            q = self.queues.setdefault(int(g), _WarpgroupQueues())
            q.committed.append(q.open)
            q.open = []

    def wait(self, s: wi.WgmmaWait, mask: Any) -> None:
        rows, cols = None, None
        for g in self.groups(s, mask):
            q = self.queues.get(int(g))
            if q is None:
                continue
            done = max(0, len(q.committed) - s.pending)
            for group in q.committed[:done]:
                for p in group:
                    a, b = p.reread()
                    if not (
                        np.array_equal(a, p.a, equal_nan=True)
                        and np.array_equal(b, p.b, equal_nan=True)
                    ):
                        self.fail(
                            p.stmt,
                            "a shared operand changed before the wgmma reading it completed "
                            "(overwritten before its wgmma.wait_group)",
                        )
                    rows, cols = _positions(p.stmt.n)
                    c = np.full((wl.M, p.stmt.n), np.nan)
                    c[rows, cols] = p.acc[g, p.tile]
                    d = p.a.astype(np.float64) @ p.b.astype(np.float64).T + c
                    p.acc[g, p.tile] = d.astype(np.float32)[rows, cols]
            del q.committed[:done]

    def store(self, s: wi.WgmmaStore, mask: Any) -> None:
        run = self.run
        groups = self.groups(s, mask)
        arr, tiles = self.accumulator(s, s.acc, s.tile, groups, mask)
        self.check_not_in_flight(s, s.acc, groups, tiles)
        buf, mem = run.bufs_of(s.dst.buffer)
        if buf.scope not in ir.MEMORY_TILE_SCOPES or buf.dtype != "float32":
            self.fail(
                s,
                f"stores into {buf.scope} {buf.dtype} {buf.name}; float32 global or "
                "shared memory only",
            )
        if s.dst.layout not in ir.MATRIX_LAYOUTS:
            self.fail(s, f"unknown layout {s.dst.layout!r}")
        offset = self.value(s, s.dst.offset, groups, mask, f"the offset into {buf.name}")
        if s.dst.ldm % 2 or (offset % 2).any():
            self.fail(s, f"ldm {s.dst.ldm} and offset into {buf.name} must be even (float2)")
        rows, cols = _positions(s.acc.shape[-1])
        if s.dst.layout == "col_major":
            rows, cols = cols, rows
        idx = offset.astype(np.int64)[:, None, None] + rows * s.dst.ldm + cols  # (groups, 128, v)
        vals = arr[groups, tiles]
        lanes = (groups[:, None, None] * G + np.arange(G)[None, :, None] + 0 * idx).reshape(-1)
        run._check_bounds(buf, idx.reshape(-1), lanes, "write")
        if buf.scope == "global":
            mem[idx] = vals
            return
        keys = run.ix["block"][lanes] * buf.size + idx.reshape(-1)
        run._track_write(buf, mem, keys, vals.reshape(-1), lanes, False)
        mem.reshape(-1)[keys] = vals.reshape(-1)
        self.shared_written(buf, keys, lanes)

    # ---- shared memory through descriptors ------------------------------------------------
    def operand(self, s: Any, op: wi.SharedOperand, rows: int, groups, mask) -> np.ndarray:
        """Element indices (groups, rows, 16) of an operand, read through its descriptor."""
        buf = op.buffer
        if buf.scope != "shared":
            self.fail(s, f"wgmma operand {buf.name} is in {buf.scope} memory, not shared")
        if op.major not in wl.MAJORS or op.swizzle not in wl.SWIZZLE_BITS:
            self.fail(s, f"operand {buf.name}: unknown major {op.major!r} / swizzle {op.swizzle!r}")
        offset = self.value(s, op.offset, groups, mask, f"the offset into {buf.name}")
        start = offset.astype(np.int64) * BYTES[buf.dtype]
        misaligned = np.flatnonzero(start % wl.UNIT_BYTES)
        if misaligned.size:
            self.fail(
                s,
                f"operand {buf.name} starts at byte {int(start[misaligned[0]])}, not "
                "16-byte aligned",
            )
        row, k = np.meshgrid(np.arange(rows), np.arange(wl.K), indexing="ij")
        out = np.empty((len(groups), rows, wl.K), np.int64)
        for j, st in enumerate(start):
            d = wl.decode(wl.encode(int(st), op.lbo, op.sbo, op.swizzle))
            out[j] = wl.element_address(d, op.major, row, k)
        if (out % BYTES[buf.dtype]).any():
            self.fail(s, f"operand {buf.name}: the descriptor gives unaligned element addresses")
        return out // BYTES[buf.dtype]

    def read(self, s: Any, buf: ir.Buffer, idx: np.ndarray, groups, track: bool = True):
        run = self.run
        blocks = run.ix["block"][groups * G]
        lanes = np.repeat(groups * G, idx[0].size)
        run._check_bounds(buf, idx.reshape(-1), lanes, "read")
        keys = (blocks[:, None, None] * buf.size + idx).reshape(-1)
        if track:
            dirty = self.unfenced.get(id(buf))
            if dirty is not None and dirty[keys].any():
                j = int(np.flatnonzero(dirty[keys])[0])
                self.fail(
                    s,
                    f"reads {buf.name}[{int(keys[j] % buf.size)}], written by thread "
                    f"{int(dirty[keys][j]) - 1} of its block with no fence.proxy.async since",
                )
            self._track_read(buf, keys, lanes)
        _, mem = run.bufs_of(buf)
        return from_storage(mem[blocks[:, None, None], idx], buf.dtype).astype(np.float32)

    def _track_read(self, buf: ir.Buffer, keys: np.ndarray, lanes: np.ndarray) -> None:
        run = self.run
        tr = run.trackers[id(buf)]
        t = run.ix["tid"][lanes]
        bad = tr.others(tr.wmin[keys], tr.wmax[keys], t)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            run._race(buf, int(keys[j]), int(lanes[j]), "reads (wgmma)", "wrote")
        np.minimum.at(tr.rmin, keys, t)
        np.maximum.at(tr.rmax, keys, t + G - 1)

    def shared_written(self, buf: ir.Buffer, keys: np.ndarray, lanes: np.ndarray) -> None:
        """Record ordinary stores into shared memory: a wgmma may read them after a ProxyFence."""
        dirty = self.unfenced.get(id(buf))
        if dirty is None:
            dirty = self.unfenced[id(buf)] = np.zeros(self.run.nblocks * buf.size, np.int64)
        dirty[keys] = self.run.ix["tid"][lanes] + 1

    def proxy_fence(self, s: wi.ProxyFence, mask: Any) -> None:
        run = self.run
        active = np.ones(run.L, bool) if mask is None else np.broadcast_to(mask, (run.L,))
        active = active.reshape(run.nblocks, run.T)
        for dirty in self.unfenced.values():
            size = dirty.size // run.nblocks
            keys = np.flatnonzero(dirty)
            cleared = active[keys // size, dirty[keys] - 1]
            dirty[keys[cleared]] = 0


def register_wgmma_handlers(table: TypeTable[ir.Stmt, [Any], None], run: Any) -> WgmmaRun:
    """Register the warpgroup statements' handlers, bound to the kernel run `run`, in its
    statement table; returns the state they share (the run reports shared stores to it)."""
    state = WgmmaRun(run)
    table.register(wi.WgmmaFill, state.fill)
    table.register(wi.WgmmaMma, state.mma)
    table.register(wi.WgmmaStore, state.store)
    table.register(wi.WgmmaFence, state.fence)
    table.register(wi.WgmmaCommit, state.commit)
    table.register(wi.WgmmaWait, state.wait)
    table.register(wi.ProxyFence, state.proxy_fence)
    return state


__all__ = ["WgmmaRun", "accumulator_storage", "register_wgmma_handlers"]
