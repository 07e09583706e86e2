"""The CPU interpreter's warpgroup statements (`lower/wgmma_ir.py`): wgmma as the PTX ISA
defines it (`wgmma_layout.py`).

A warpgroup is 128 consecutive thread ids of a block (`tid // 128`). Its accumulators are
(warpgroups, tiles, 128 threads, N / 2 values): thread t's registers, value i at the position
`accumulator_position(t, i)` of the 64 x N tile. A wgmma may also accumulate into an "mma"
flavour accumulator (per warp (tiles, 32 lanes, 8 values)): its registers as the wgmma sees
them are those of N / 16 consecutive tiles of the warpgroup's 4 warps (`_registers`). Every
warpgroup with an active thread must have all 128 active, and they must agree on every
expression of the statement.

- `WgmmaMma` encodes each operand's descriptor from the tile's shared address (the buffer's
  start is address 0: the printer aligns it to its swizzle pattern) with `wgmma_layout.encode`,
  decodes it as the hardware does and gathers the 64 x 16 A and N x 16 B from the addresses the
  descriptor gives (`element_address`): a wrong LBO, SBO, major-ness or swizzle reads wrong
  elements. It computes `A @ B + C` in float64 rounded once to float32 (C: the registers, or
  the result of a wgmma still in flight on the same registers), but the registers hold NaN, as
  undefined, until the `WgmmaWait` that covers its commit group (`WgmmaCommit` closes a group,
  `WgmmaWait(n)` completes every group but the newest n, in order) writes the result there.
- Asynchrony is enforced: registers written while a wgmma on them is in flight, a shared
  operand changed before the wgmma that reads it completes, a wgmma on registers written by
  other instructions since the warpgroup's last `WgmmaFence` (or never fenced), and the
  warpgroup statements' own accesses to registers in flight are errors; other reads in flight
  read NaN.
- Shared memory: a wgmma's read goes through the race tracker (another thread's write since the
  last barrier races), and an element written by an ordinary store must have been fenced by its
  writer (`ProxyFence`) after it landed (a cp.async's at the wait that completes it) and before
  the wgmma reads it.
- A wgmma reads its operands at any time until the wait that retires it, and a thread knows
  another warpgroup's wait only through a barrier after it: a shared store (a cp.async when it
  is issued, since the copy may land at once) into an element that a wgmma in flight reads, or
  that a wgmma of another warpgroup read and no barrier has followed its retirement, is an
  error (`AsyncReads`). So a fetch into a pipeline slot before the wait that frees it fails
  even where the copy would land late enough in this lock-step run.
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
from autosched.lower.warp_context import active_units, track_collective_read
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


class AsyncReads:
    """Which shared elements the wgmmas of each block may still be reading: a count of the
    wgmmas in flight that read each element, and the warpgroups (a bit each, by place in the
    block) whose wgmmas that read it retired since the block's last barrier."""

    def __init__(self, nblocks: int) -> None:
        self.nblocks = nblocks
        self.inflight: dict[int, np.ndarray] = {}
        self.retired: dict[int, np.ndarray] = {}

    def _arrays(self, buf: ir.Buffer) -> tuple[np.ndarray, np.ndarray]:
        if id(buf) not in self.inflight:
            self.inflight[id(buf)] = np.zeros(self.nblocks * buf.size, np.int64)
            self.retired[id(buf)] = np.zeros(self.nblocks * buf.size, np.int64)
        return self.inflight[id(buf)], self.retired[id(buf)]

    def issued(self, buf: ir.Buffer, keys: np.ndarray) -> None:
        np.add.at(self._arrays(buf)[0], np.unique(keys), 1)

    def retire(self, buf: ir.Buffer, keys: np.ndarray, place: int) -> None:
        inflight, retired = self._arrays(buf)
        keys = np.unique(keys)
        np.subtract.at(inflight, keys, 1)
        retired[keys] |= 1 << place

    def barrier(self) -> None:
        for retired in self.retired.values():
            retired.fill(0)

    def conflict(self, buf: ir.Buffer, keys: np.ndarray, places: np.ndarray) -> tuple[int, str]:
        """The first of `keys` that writers at warpgroup `places` may not store into yet
        (-1 if none) and why."""
        if id(buf) not in self.inflight:
            return -1, ""
        inflight, retired = self._arrays(buf)
        busy = np.flatnonzero(inflight[keys] > 0)
        if busy.size:
            return int(busy[0]), "a wgmma in flight reads it (no wgmma.wait_group retired it)"
        other = np.flatnonzero(retired[keys] & ~(np.int64(1) << places))
        if other.size:
            return int(other[0]), (
                "a wgmma of another warpgroup read it and no barrier followed the "
                "wgmma.wait_group that retired it"
            )
        return -1, ""


@dataclass
class _Pending:
    """One wgmma in flight in one warpgroup: its registers and what they will hold."""

    stmt: wi.WgmmaMma
    arr: np.ndarray
    group: int
    tile: int
    result: np.ndarray  # (128, N / 2)
    operands: tuple[np.ndarray, np.ndarray]  # A (64, 16) and B (N, 16) as read at issue
    reread: Any  # () -> (A, B) as shared memory holds them now
    keys: tuple[tuple[ir.Buffer, np.ndarray], ...]  # the shared elements it reads


@dataclass
class _WarpgroupQueues:
    """A warpgroup's open group and its committed, incomplete groups."""

    open: list[_Pending] = field(default_factory=list)
    committed: list[list[_Pending]] = field(default_factory=list)

    def pending(self):
        """The wgmmas in flight in issue order: the committed groups, oldest first, then the
        open one (a wgmma on registers in flight chains onto the newest of them)."""
        for group in self.committed:
            yield from group
        yield from self.open


def _span(acc: ir.Buffer, tile: int, n: int) -> set[int]:
    """The tiles of `acc` a wgmma of width N on tile `tile` reads and writes."""
    return {tile} if acc.fragment_flavour == ir.WGMMA_FLAVOUR else set(range(tile, tile + n // 16))


def _registers(acc: ir.Buffer, arr: np.ndarray, g: int, tile: int, n: int) -> np.ndarray:
    """The (128, N / 2) registers of warpgroup g that a wgmma on `acc[tile]` of width N reads
    and writes, as an index into `arr` (a tuple of arrays): a warpgroup accumulator's tile, or
    tiles tile .. tile + N / 16 - 1 of the 4 warps of an mma-flavour one (thread 32 w + l's
    value 8 j + e is warp w's lane l's value e of tile tile + j)."""
    t, i = np.meshgrid(np.arange(G), np.arange(n // 2), indexing="ij")
    if acc.fragment_flavour == ir.WGMMA_FLAVOUR:
        return (np.full_like(t, g), np.full_like(t, tile), t, i)  # type: ignore[return-value]
    warps = g * wl.WARPGROUP_WARPS + t // ir.WARP_SIZE
    return (warps, tile + i // 8, t % ir.WARP_SIZE, i % 8)  # type: ignore[return-value]


class WgmmaRun:
    """The warpgroup statements of one kernel run (`interpreter._KernelRun`)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.queues: dict[int, _WarpgroupQueues] = {}
        # (id(accumulator), warpgroup) -> the accumulator's storage at the warpgroup's last
        # wgmma.fence, kept up to date with what wgmmas wrote since
        self.fenced: dict[tuple[int, int], np.ndarray] = {}
        # (id(accumulator), warpgroup, tile) -> what the registers of wgmmas in flight hold
        self.expected: dict[tuple[int, int, int], np.ndarray] = {}
        # per shared buffer: writer thread id + 1 of an ordinary store not yet proxy-fenced
        self.unfenced: dict[int, np.ndarray] = {}
        self.async_reads = AsyncReads(run.nblocks)

    # ---- shared context -------------------------------------------------------------------
    def fail(self, s: Any, what: str) -> None:
        self.run.fail(f"{s.describe()} in kernel {self.run.k.name}: {what}")

    def groups(self, s: Any, mask: Any) -> np.ndarray:
        """The warpgroups (global ids) running `s`, checked to be whole."""
        run = self.run
        if run.T % G or run.k.block[0] != ir.WARP_SIZE:
            self.fail(s, f"needs blockDim.x == 32 and whole warpgroups ({run.k.block} threads)")
        groups, w, count = active_units(run, mask, G)
        if w is not None:
            self.fail(
                s,
                f"reached by {count} of {G} threads of the warpgroup of "
                f"{run.where(w * G)} (divergent warpgroup op)",
            )
        return groups

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
        """(storage, tile per warpgroup) of a warpgroup accumulator operand (or, for a wgmma,
        an mma-flavour one), checked."""
        mma = isinstance(s, wi.WgmmaMma) and acc.fragment_flavour == "mma"
        if acc.scope != ir.ACCUMULATOR_SCOPE or not (
            mma or acc.fragment_flavour == ir.WGMMA_FLAVOUR
        ):
            self.fail(s, f"{acc.name} is no warpgroup accumulator ({acc.scope})")
        n = s.n if isinstance(s, wi.WgmmaMma) else acc.shape[-1]
        if n not in wl.VALID_N or (mma and n % ir.WMMA_TILE) or acc.dtype != "float32":
            self.fail(
                s,
                f"{acc.name}: N = {n} {acc.dtype}; wgmma takes float32, N a multiple of "
                f"{wl.N_STEP} up to {wl.N_MAX} (of 16 into an mma accumulator)",
            )
        if not mma and n != acc.shape[-1]:
            self.fail(s, f"N = {n} but {acc.name}'s tiles are {acc.shape[-1]} wide")
        _, arr = self.run.bufs_of(acc)
        tiles = self.value(s, tile, groups, mask, f"the tile number of {acc.name}").astype(int)
        span = n // ir.WMMA_TILE if mma else 1
        bad = np.flatnonzero((tiles < 0) | (tiles + span > arr.shape[1]))
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

    def fence(self, s: wi.WgmmaFence, mask: Any) -> None:
        """Remember the accumulators' registers: a wgmma may use them while they hold this
        (or what wgmmas wrote since). One snapshot serves the statement's warpgroups, whose
        registers are disjoint parts of it."""
        groups = self.groups(s, mask)
        for b in wi.wgmma_accumulators(self.run.k):
            snapshot = self.run.bufs_of(b)[1].copy()
            for g in groups:
                self.fenced[(id(b), int(g))] = snapshot

    def mma(self, s: wi.WgmmaMma, mask: Any) -> None:
        groups = self.groups(s, mask)
        arr, tiles = self.accumulator(s, s.acc, s.acc_tile, groups, mask)
        if s.a.buffer.dtype != s.b.buffer.dtype or s.a.buffer.dtype not in wl.TYPES:
            self.fail(
                s,
                f"multiplies {s.a.buffer.dtype} by {s.b.buffer.dtype}; wgmma takes "
                f"{tuple(wl.TYPES)} pairs",
            )
        a_idx = self.operand(s, s.a, wl.M, groups, mask)  # (groups, 64, 16)
        b_idx = self.operand(s, s.b, s.n, groups, mask)  # (groups, N, 16)
        a_all = self.read(s, s.a.buffer, a_idx, groups)
        b_all = self.read(s, s.b.buffer, b_idx, groups)
        for j, g in enumerate(groups):
            g, tile = int(g), int(tiles[j])
            q = self.queues.setdefault(g, _WarpgroupQueues())
            regs = _registers(s.acc, arr, g, tile, s.n)
            chained = [p for p in q.pending() if p.stmt.acc is s.acc and p.tile == tile]
            span = _span(s.acc, tile, s.n)
            if any(
                p.stmt.acc is s.acc and p.tile != tile and _span(s.acc, p.tile, p.stmt.n) & span
                for p in q.pending()
            ):
                self.fail(s, f"overlaps the registers of another wgmma in flight on {s.acc.name}")
            if chained:
                c = chained[-1].result
            else:
                fenced = self.fenced.get((id(s.acc), g))
                if fenced is None or not np.array_equal(fenced[regs], arr[regs], equal_nan=True):
                    self.fail(
                        s,
                        f"{s.acc.name} was written by other instructions since the warpgroup of "
                        f"{self.run.where(g * G)} last ran wgmma.fence",
                    )
                c = arr[regs]
            rows, cols = _positions(s.n)
            c_mat = np.full((wl.M, s.n), np.nan)
            c_mat[rows, cols] = c
            d = a_all[j].astype(np.float64) @ b_all[j].astype(np.float64).T + c_mat
            result = d.astype(np.float32)[rows, cols]

            def reread(j=j, g=g) -> tuple[np.ndarray, np.ndarray]:
                one = np.array([g])
                return (
                    self.read(s, s.a.buffer, a_idx[j : j + 1], one, track=False)[0],
                    self.read(s, s.b.buffer, b_idx[j : j + 1], one, track=False)[0],
                )

            block = int(self.run.ix["block"][g * G]) * np.int64(1)
            keys = (
                (s.a.buffer, block * s.a.buffer.size + a_idx[j].reshape(-1)),
                (s.b.buffer, block * s.b.buffer.size + b_idx[j].reshape(-1)),
            )
            for buf, k in keys:
                self.async_reads.issued(buf, k)
            pending = _Pending(s, arr, g, tile, result, (a_all[j], b_all[j]), reread, keys)
            q.open.append(pending)
            self.undefined(s.acc, arr, g, tile, regs)

    def undefined(self, acc: ir.Buffer, arr: np.ndarray, g: int, tile: int, regs) -> None:
        """Registers in flight hold nothing defined: NaN, what the fence record expects too."""
        arr[regs] = np.nan
        self.expected[(id(acc), g, tile)] = arr[regs]
        fenced = self.fenced.get((id(acc), g))
        if fenced is not None:
            fenced[regs] = np.nan

    def commit(self, s: wi.WgmmaCommit, mask: Any) -> None:
        for g in self.groups(s, mask):
            q = self.queues.setdefault(int(g), _WarpgroupQueues())
            q.committed.append(q.open)
            q.open = []

    def wait(self, s: wi.WgmmaWait, mask: Any) -> None:
        for g in self.groups(s, mask):
            q = self.queues.get(int(g))
            if q is None:
                continue
            done = max(0, len(q.committed) - s.pending)
            for group in q.committed[:done]:
                for p in group:
                    self.complete(p)
            del q.committed[:done]

    def complete(self, p: _Pending) -> None:
        """The registers of a wgmma in flight receive its result, once checked untouched."""
        a, b = p.reread()
        if not (
            np.array_equal(a, p.operands[0], equal_nan=True)
            and np.array_equal(b, p.operands[1], equal_nan=True)
        ):
            self.fail(
                p.stmt,
                "a shared operand changed before the wgmma reading it completed "
                "(overwritten before its wgmma.wait_group)",
            )
        place = p.group % (self.run.T // G)  # the warpgroup's place in its block
        for buf, keys in p.keys:
            self.async_reads.retire(buf, keys, place)
        regs = _registers(p.stmt.acc, p.arr, p.group, p.tile, p.stmt.n)
        key = (id(p.stmt.acc), p.group, p.tile)
        if not np.array_equal(p.arr[regs], self.expected[key], equal_nan=True):
            self.fail(
                p.stmt,
                f"registers of {p.stmt.acc.name} were written while the wgmma writing them was "
                "in flight (before its wgmma.wait_group)",
            )
        self.expected[key] = p.result
        p.arr[regs] = p.result
        fenced = self.fenced.get((id(p.stmt.acc), p.group))
        if fenced is not None:
            fenced[regs] = p.result

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
        track_collective_read(self.run, buf, keys, lanes, G, "reads (wgmma)")

    def check_overwrite(self, buf: ir.Buffer, keys: np.ndarray, lanes: np.ndarray) -> None:
        """A shared store into `keys` by `lanes` (issued now: a cp.async may land at once) must
        not reach what a wgmma may still read (`AsyncReads`)."""
        places = self.run.ix["tid"][lanes] // G
        j, why = self.async_reads.conflict(buf, keys, places)
        if j >= 0:
            self.run.fail(
                f"{self.run.where(int(lanes[j]))} stores into {buf.name}[{int(keys[j] % buf.size)}]"
                f" in kernel {self.run.k.name}, but {why}"
            )

    def barrier(self) -> None:
        """A barrier: every warpgroup's retired wgmmas are done for every thread after it."""
        self.async_reads.barrier()

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


__all__ = ["AsyncReads", "WgmmaRun", "accumulator_storage", "register_wgmma_handlers"]
