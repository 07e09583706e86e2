"""The CPU interpreter's TMA and mbarrier statements (`lower/tma_ir.py`), as the PTX ISA
defines them.

- An mbarrier slot of a block holds its expected arrival count, the arrivals still pending in
  the current phase, the transaction count (bytes announced by `expect_tx` and not yet
  delivered) and the number of completed phases. The current phase completes when no arrival
  is pending and the transaction count is zero: the pending count is reset, the phase count
  grows by one. An mbarrier is used only after `MbarrierInit` and a `Barrier` after it.
- `TmaLoad` reads the box of its tensor map at the block's coordinates from global memory
  (an im2col map: its pixels along the traversal from the coordinates' pixel, shifted by the
  offsets, `tma_ir.Im2col`), zero outside the tensor, and writes it into shared memory
  row-major from the destination offset; with the 128-byte swizzle (its rows are exactly 128
  bytes; the destination starts on a 1024-byte boundary) the 16-byte piece j of row r lands
  at piece j ^ (r % 8). Its bytes count
  against the slot's transaction count (more than announced is an error). The elements it
  wrote are marked in flight on (slot, phase): reading one (ordinary load or wgmma) before the
  thread waited for that phase is an error. It must not overwrite what a wgmma may still read
  (`interpret_wgmma.AsyncReads`), what another copy still has in flight, or what threads read or
  wrote since the last barrier (the barrier is the slot's release).
- `MbarrierWait(slot, parity)` returns once the slot's phase of that parity completed: where
  the current, incomplete phase has that parity nothing in this lock-step run can complete it
  any more, which on the GPU is a deadlock (or a wait on the wrong parity): an error. A wait
  that returns makes the copies of every completed phase of the slot visible to the block.
- The block reaches elected statements and waits together (like a barrier); a kernel that
  ends with bytes still expected on an mbarrier is an error, and so is one that ends with a
  copy never waited for into a buffer another is laid over (`ir.SharedAlias`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower.dispatch import TypeTable
from autosched.te.dtype import BYTES


def swizzle_128b(byte_offset: np.ndarray) -> np.ndarray:
    """The 128-byte swizzle of byte offsets from a 1024-byte boundary: bits 4-6 XOR bits 7-9."""
    return byte_offset ^ (((byte_offset >> 7) & 7) << 4)


class _Barriers:
    """The state of one shared mbarrier array in every block: (blocks, slots) arrays."""

    def __init__(self, nblocks: int, slots: int) -> None:
        shape = (nblocks, slots)
        self.count = np.zeros(shape, np.int64)
        self.pending = np.zeros(shape, np.int64)
        self.tx = np.zeros(shape, np.int64)
        self.phase = np.zeros(shape, np.int64)
        self.inited = np.zeros(shape, bool)
        self.visible = np.zeros(shape, bool)

    def complete(self, b: int, slot: int) -> None:
        """Complete the current phase if nothing is pending on it."""
        if self.pending[b, slot] == 0 and self.tx[b, slot] == 0:
            self.phase[b, slot] += 1
            self.pending[b, slot] = self.count[b, slot]


class _InFlight:
    """Which elements of one shared buffer a TMA copy wrote and no wait made visible yet: the
    mbarrier array, slot (-1: none) and phase of each (blocks * size)."""

    def __init__(self, size: int, bars: ir.Buffer) -> None:
        self.bars = bars
        self.slot = np.full(size, -1, np.int64)
        self.phase = np.zeros(size, np.int64)


class TmaRun:
    """The TMA and mbarrier statements of one kernel run (`interpreter._KernelRun`)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.barriers: dict[int, _Barriers] = {}
        self.in_flight: dict[int, _InFlight] = {}
        self.arrived: set[int] = set()  # mbarriers that threads arrive on (`MbarrierArrive`)

    def fail(self, s: Any, what: str) -> None:
        self.run.fail(f"{type(s).__name__} in kernel {self.run.k.name}: {what}")

    def blocks(self, s: Any, mask: Any) -> np.ndarray:
        """The blocks running `s`, all of whose threads (of its warp role, in a role split)
        must reach it."""
        run = self.run
        run._uniform(mask, type(s).__name__, run.role_threads)
        if mask is None:
            return np.arange(run.nblocks)
        active = np.broadcast_to(mask, (run.L,)).reshape(run.nblocks, run.T)
        return np.flatnonzero(active.any(axis=1))

    def first_lanes(self, blocks: np.ndarray, mask: Any) -> np.ndarray:
        """The first active thread (the elected issuer) of each of `blocks`, as a lane."""
        run = self.run
        if mask is None:
            return blocks * run.T
        active = np.broadcast_to(mask, (run.L,)).reshape(run.nblocks, run.T)
        return blocks * run.T + active[blocks].argmax(axis=1)

    def per_block(self, e: Any, blocks: np.ndarray, mask: Any) -> np.ndarray:
        """`e` as the elected thread of each block evaluates it."""
        got = np.broadcast_to(np.asarray(self.run.eval(e, mask)), (self.run.L,))
        return got[self.first_lanes(blocks, mask)].astype(np.int64)

    def ready(self, s: ti.MbarrierWait, mask: Any) -> bool:
        """Whether wait `s` returns now in every block running it (its phase completed)."""
        blocks = self.blocks(s, mask)
        slots = self.per_block(s.slot, blocks, mask)
        parity = self.per_block(s.parity, blocks, mask)
        st = self.state(s, s.bars, slots, blocks)
        return bool((st.phase[blocks, slots] % 2 != parity % 2).all())

    def state(self, s: Any, bars: ir.Buffer, slots: np.ndarray, blocks: np.ndarray) -> _Barriers:
        """The mbarriers `bars`, checked initialised, made visible and `slots` in range."""
        st = self.barriers.get(id(bars))
        if bars.scope != "shared" or bars.dtype != ti.MBARRIER_DTYPE:
            self.fail(s, f"{bars.name} is no shared {ti.MBARRIER_DTYPE} mbarrier array")
        if st is None:
            self.fail(s, f"uses mbarrier {bars.name} before its mbarrier.init")
        assert st is not None
        bad = np.flatnonzero((slots < 0) | (slots >= bars.size))
        if bad.size:
            self.fail(s, f"slot {int(slots[bad[0]])} of {bars.name} is out of range")
        if not st.visible[blocks, slots].all():
            self.fail(s, f"uses mbarrier {bars.name} with no barrier after its mbarrier.init")
        return st

    # ---- statements -----------------------------------------------------------------------
    def init(self, s: ti.MbarrierInit, mask: Any) -> None:
        blocks = self.blocks(s, mask)
        st = self.barriers.setdefault(id(s.bars), _Barriers(self.run.nblocks, s.bars.size))
        if (st.tx[blocks] != 0).any():
            self.fail(s, f"re-initialises {s.bars.name} while copies are in flight on it")
        if s.count < 1:
            self.fail(s, f"an mbarrier expects at least one arrival, not {s.count}")
        for arr, value in ((st.count, s.count), (st.pending, s.count), (st.tx, 0), (st.phase, 0)):
            arr[blocks] = value
        st.inited[blocks] = True
        st.visible[blocks] = False

    def expect_tx(self, s: ti.MbarrierExpectTx, mask: Any) -> None:
        blocks = self.blocks(s, mask)
        slots = self.per_block(s.slot, blocks, mask)
        st = self.state(s, s.bars, slots, blocks)
        for b, slot in zip(blocks, slots, strict=True):
            if st.pending[b, slot] < 1:
                self.fail(s, f"arrives on {s.bars.name}[{slot}] with no arrival pending")
            st.tx[b, slot] += s.nbytes
            st.pending[b, slot] -= 1
            st.complete(b, slot)

    def load(self, s: ti.TmaLoad, mask: Any) -> None:
        run = self.run
        problem = s.map.problem()
        if problem:
            self.fail(s, problem)
        dst, src = s.dst, s.map.buffer
        if dst.scope != "shared" or dst.dtype != src.dtype:
            self.fail(s, f"copies {src.dtype} {src.name} into {dst.scope} {dst.dtype} {dst.name}")
        blocks = self.blocks(s, mask)
        slots = self.per_block(s.slot, blocks, mask)
        st = self.state(s, s.bars, slots, blocks)
        offsets = self.per_block(s.offset, blocks, mask)
        coords = [self.per_block(c, blocks, mask) for c in s.coords]
        if len(coords) != s.map.rank:
            self.fail(s, f"{len(coords)} coordinates for a box of rank {s.map.rank}")
        shifts = [self.per_block(o, blocks, mask) for o in s.offsets]
        spatial = s.map.rank - 2 if s.map.im2col is not None else 0
        if len(shifts) != spatial:
            self.fail(s, f"{len(shifts)} im2col offsets for {spatial} spatial dimensions")
        _, gmem = run.bufs_of(src)
        _, smem = run.bufs_of(dst)
        flight = self.in_flight.setdefault(id(dst), _InFlight(run.nblocks * dst.size, s.bars))
        if flight.bars is not s.bars:
            self.fail(s, f"copies into {dst.name} complete on two mbarrier arrays")
        elem = BYTES[dst.dtype]
        box = np.indices(s.map.box).reshape(len(s.map.box), -1)  # (dims, elements), row-major
        linear = np.arange(box.shape[1], dtype=np.int64) * elem
        if s.map.swizzle == "128B":
            linear = swizzle_128b(linear)
        issuers = self.first_lanes(blocks, mask)
        for j, b in enumerate(blocks):
            origin = [int(coords[d][j]) for d in range(s.map.rank)]
            if s.map.im2col is not None:
                at = self.im2col_elements(s, origin, [int(o[j]) for o in shifts], box)
            else:
                at = np.array(origin)[:, None] + box
            inside = ((at >= 0) & (at < np.array(s.map.shape)[:, None])).all(axis=0)
            flat = np.ravel_multi_index(tuple(np.where(inside, at, 0)), s.map.shape)
            values = np.where(inside, gmem[flat], np.zeros((), gmem.dtype))
            start = int(offsets[j]) * elem
            align = ti.TMA_ALIGN[s.map.swizzle]
            if start % align:
                self.fail(
                    s,
                    f"a box of swizzle {s.map.swizzle} lands at byte {start} of {dst.name}, not "
                    f"on a {align}-byte boundary",
                )
            idx = (start + linear) // elem
            lane = int(issuers[j])
            run._check_bounds(dst, idx, np.full(idx.size, lane), "write (TMA)")
            keys = int(b) * dst.size + idx
            self.check_overwrite(s, dst, keys, lane, flight)
            smem.reshape(-1)[keys] = values
            flight.slot[keys] = slots[j]
            flight.phase[keys] = st.phase[b, slots[j]]
            st.tx[b, slots[j]] -= s.map.box_bytes
            if st.tx[b, slots[j]] < 0:
                self.fail(
                    s,
                    f"delivers more bytes to {s.bars.name}[{slots[j]}] than its "
                    "mbarrier.arrive.expect_tx announced",
                )
            st.complete(b, slots[j])

    def im2col_elements(
        self, s: ti.TmaLoad, origin: list[int], shifts: list[int], box: np.ndarray
    ) -> np.ndarray:
        """The tensor coordinates (rank, elements) an im2col copy reads for box elements `box`
        ((pixel, channel) rows): pixel i is the traversal's position i past the first pixel
        `origin` (`tma_ir.Im2col`), shifted by the offsets; channels from origin's last."""
        i2c = s.map.im2col
        assert i2c is not None
        shape = s.map.shape
        positions = i2c.positions(shape[1:-1])
        steps = []
        for d, (start, lo, stride, count) in enumerate(
            zip(origin[1:-1], i2c.lower, i2c.strides, positions, strict=True)
        ):
            k, off = divmod(start - lo, stride)
            if off or not 0 <= k < count:
                self.fail(s, f"starts at {start} of dimension {d + 1}, off its im2col traversal")
            steps.append(k)
        if any(not 0 <= o <= ti.IM2COL_OFFSET_MAX for o in shifts):
            self.fail(s, f"im2col offsets {shifts}: each 0..{ti.IM2COL_OFFSET_MAX}")
        first = origin[0]
        for k, count in zip(steps, positions, strict=True):
            first = first * count + k
        pixel = first + box[0]
        out = [np.zeros_like(pixel) for _ in shape]
        for d in reversed(range(len(positions))):
            pixel, k = np.divmod(pixel, positions[d])
            out[d + 1] = i2c.lower[d] + k * i2c.strides[d] + shifts[d]
        out[0] = pixel
        out[-1] = origin[-1] + box[1]
        return np.stack(out)

    def check_overwrite(self, s: Any, dst: ir.Buffer, keys, lane: int, flight: _InFlight) -> None:
        run = self.run
        busy = np.flatnonzero(flight.slot[keys] >= 0)
        if busy.size:
            self.fail(
                s,
                f"overwrites {dst.name}[{int(keys[busy[0]] % dst.size)}], which a copy "
                "no thread waited for still writes",
            )
        tr = run.trackers[id(dst)]
        touched = np.flatnonzero((tr.rmax[keys] >= 0) | (tr.wmax[keys] >= 0))
        if touched.size:
            self.fail(
                s,
                f"overwrites {dst.name}[{int(keys[touched[0]] % dst.size)}], which "
                "threads accessed since the last barrier (the slot was not released)",
            )
        if run.wgmma is not None:
            run.wgmma.check_overwrite(dst, keys, np.full(keys.size, lane))

    def wait(self, s: ti.MbarrierWait, mask: Any) -> None:
        blocks = self.blocks(s, mask)
        slots = self.per_block(s.slot, blocks, mask)
        parity = self.per_block(s.parity, blocks, mask)
        st = self.state(s, s.bars, slots, blocks)
        for b, slot, p in zip(blocks, slots, parity, strict=True):
            if st.phase[b, slot] % 2 == p % 2:
                self.fail(
                    s,
                    f"waits on parity {int(p)} of {s.bars.name}[{slot}] in "
                    f"{run_where(self.run, b)}, whose current phase has that parity and "
                    "nothing left to complete it (deadlock, or the wrong parity)",
                )
            if id(s.bars) in self.arrived and st.phase[b, slot] > 0:
                self.run.release()  # the arriving threads' accesses before the waiter's
            for flight in self.in_flight.values():
                if flight.bars is s.bars:
                    n = flight.slot.size // self.run.nblocks
                    part = slice(int(b) * n, (int(b) + 1) * n)
                    done = (flight.slot[part] == slot) & (flight.phase[part] < st.phase[b, slot])
                    flight.slot[part][done] = -1

    # ---- hooks ----------------------------------------------------------------------------
    def check_read(self, buf: ir.Buffer, keys: np.ndarray, lanes: np.ndarray) -> None:
        """A shared read must not reach an element a copy writes that no wait made visible."""
        flight = self.in_flight.get(id(buf))
        if flight is None:
            return
        busy = np.flatnonzero(flight.slot[keys] >= 0)
        if busy.size:
            j = int(busy[0])
            self.run.fail(
                f"{self.run.where(int(lanes[j]))} reads {buf.name}[{int(keys[j] % buf.size)}] in "
                f"kernel {self.run.k.name} before waiting on the mbarrier of the TMA copy "
                "writing it"
            )

    def barrier(self) -> None:
        """A barrier: every initialised mbarrier is now visible to every thread."""
        for st in self.barriers.values():
            st.visible |= st.inited

    def finish(self) -> None:
        for st in self.barriers.values():
            if (st.tx != 0).any():
                self.run.fail(
                    f"kernel {self.run.k.name} ends with TMA bytes still expected on an mbarrier"
                )
        for alias in self.run.k.shared_aliases:  # an unwaited copy could land on the tile
            for host in alias.hosts:
                flight = self.in_flight.get(id(host))
                if flight is not None and (flight.slot >= 0).any():
                    self.run.fail(
                        f"kernel {self.run.k.name}: a TMA copy into {host.name}, which "
                        f"{alias.tile.name} is laid over, is never waited for"
                    )


def run_where(run: Any, block: int) -> str:
    """The block of lane block * T, for messages."""
    return run.where(int(block) * run.T).split(" ")[0]


def register_tma_handlers(table: TypeTable[ir.Stmt, [Any], None], run: Any) -> TmaRun:
    """Register the TMA and mbarrier statements' handlers, bound to the kernel run `run`;
    returns the state they share (the run reports barriers and shared reads to it)."""
    state = TmaRun(run)
    table.register(ti.MbarrierInit, state.init)
    table.register(ti.MbarrierExpectTx, state.expect_tx)
    table.register(ti.TmaLoad, state.load)
    table.register(ti.MbarrierWait, state.wait)
    return state


__all__ = ["TmaRun", "register_tma_handlers", "swizzle_128b"]
