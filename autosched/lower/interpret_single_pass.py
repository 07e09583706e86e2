"""The CPU interpreter's side of single-pass kernels (`lower/single_pass_ir.py`).

The interpreter runs every block of a kernel in lock-step, so every block has written its
partials before any reads them. What a GPU guarantees is less, and this module checks that a
kernel relies on no more:

- each global element written in the kernel keeps the lane (thread) that wrote it last, and
  whether that thread fenced it since (`ThreadFence`);
- `CountArrival` hands out the counts in an order of blocks the run is given (a permutation,
  `arrival_order`): a block's flag is the counter's value plus the number of blocks that
  arrived before it. The block that finds `arrivals - 1` saw every block arrive;
- a block may read a global element another block of the kernel wrote only if it saw every
  block arrive and the writer fenced the element before arriving; any other such read is an
  `InterpreterError` (a partial read too early, by the wrong block, or never fenced).

Which block is last changes with the order; what it computes must not (the tests run two
orders and compare the bits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower import single_pass_ir as sp


class SinglePassRun:
    """The arrivals and the global-write record of one kernel run (`run`: its _KernelRun)."""

    def __init__(self, run: Any, arrival_order: np.ndarray) -> None:
        self.run = run
        self.rank = np.empty(run.nblocks, np.int64)  # block -> its place in the arrivals
        self.rank[arrival_order] = np.arange(run.nblocks)
        self.saw_all = np.zeros(run.nblocks, bool)
        # global buffer id -> (lane that wrote each element last or -1, fenced since)
        self.writes: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def register(self, table: Any) -> None:
        table.register(sp.ThreadFence, self.fence)
        table.register(sp.CountArrival, self.arrive)

    def _record(self, buf: ir.Buffer) -> tuple[np.ndarray, np.ndarray]:
        got = self.writes.get(id(buf))
        if got is None:
            got = self.writes[id(buf)] = (np.full(buf.size, -1, np.int64), np.zeros(buf.size, bool))
        return got

    def written(self, buf: ir.Buffer, idx: np.ndarray, lanes: np.ndarray) -> None:
        """Lanes `lanes` stored global elements `idx` of `buf`: not fenced yet."""
        writer, fenced = self._record(buf)
        writer[idx] = lanes
        fenced[idx] = False

    def read(self, buf: ir.Buffer, idx: np.ndarray, lanes: np.ndarray) -> None:
        """Lanes `lanes` load global elements `idx` of `buf` (the module's rule)."""
        record = self.writes.get(id(buf))
        if record is None or idx.size == 0:
            return
        writer, fenced = record
        idx = np.broadcast_to(idx, lanes.shape)
        by = writer[idx]
        block = self.run.ix["block"]
        reader = block[lanes]
        foreign = (by >= 0) & (block[np.maximum(by, 0)] != reader)
        bad = foreign & ~(fenced[idx] & self.saw_all[reader])
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            why = "was not fenced" if self.saw_all[reader[j]] else "had not seen every block arrive"
            self.run.fail(
                f"{self.run.where(int(lanes[j]))} reads {buf.name}[{int(idx[j])}], which "
                f"{self.run.where(int(by[j]))} wrote, but the reader {why} (single pass) in "
                f"kernel {self.run.k.name}"
            )

    def fence(self, s: sp.ThreadFence, mask: Any) -> None:
        lanes = self.run.lanes_of(mask)
        for writer, fenced in self.writes.values():
            fenced |= np.isin(writer, lanes) & (writer >= 0)

    def arrive(self, s: sp.CountArrival, mask: Any) -> None:
        run = self.run
        run._uniform(mask, "CountArrival")
        blocks = np.unique(run.ix["block"][run.lanes_of(mask)])
        if s.arrivals != run.nblocks:
            run.fail(
                f"CountArrival expects {s.arrivals} blocks; kernel {run.k.name} launches "
                f"{run.nblocks}"
            )
        for tr in run.trackers.values():  # the barrier before the atomic
            tr.clear()
        _, counter = run.bufs_of(s.counter)
        index = int(np.asarray(run.eval(s.index, mask)).reshape(-1)[0])
        ranks = self.rank[blocks]
        before = ranks.argsort().argsort()  # arrivals ahead of each, among those arriving now
        found = counter[index] + before
        counter[index] += len(blocks)
        _, flag = run.bufs_of(s.flag)
        flag[blocks, 0] = found
        self.saw_all[blocks] = found == s.arrivals - 1
        for tr in run.trackers.values():  # the barrier after it
            tr.clear()


def arrival_order(nblocks: int, seed: int | None) -> np.ndarray:
    """The order blocks arrive in: block order for None, else a seeded permutation."""
    if seed is None:
        return np.arange(nblocks)
    return np.random.default_rng(seed).permutation(nblocks)


def register_single_pass_handlers(table: Any, run: Any, seed: int | None) -> SinglePassRun | None:
    """The single-pass handlers of `run`'s kernel, when it counts arrivals (else None)."""
    if not any(isinstance(s, sp.SINGLE_PASS_STMTS) for s in ir.iter_stmts(run.k.body)):
        return None
    state = SinglePassRun(run, arrival_order(run.nblocks, seed))
    state.register(table)
    return state


__all__ = ["SinglePassRun", "arrival_order", "register_single_pass_handlers"]
