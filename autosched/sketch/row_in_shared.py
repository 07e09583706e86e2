"""A normalisation's row read once from DRAM into shared memory: the sketch rule
`RowInSharedMemory`.

CrossThreadReduction makes a normalisation (softmax: max, sum of exp, divide; layer norm: mean,
variance, normalise; RMSNorm: mean square, scale) one kernel with a block per row, the
reductions computed at the output's row loop. Each reduction, and the output, then reads the
row from global memory: three passes, the later ones from L1 / L2 when the row is still there,
with the DRAM traffic of one pass but the latency and L2 bandwidth of three. Where the row fits
in a block's shared memory (a softmax of 32,768 floats: 128 KB), this rule adds the sketch that
reads it once: a shared cache of the input (`cache_read`) computed at the output's row loop,
its row cut as the output's last axis is ([rest, threads, vector]: `follow_split`), the threads
on threadIdx.x and each thread's vector loaded as one 16-byte access; the reductions and the
output then read the row from shared memory. DoubleBuffer's mark on such a cache makes its
fetch asynchronous (`cp.async`, lower/double_buffer.py `fetched_async_once`). The sketch
without the cache is kept as well: the search measures whether the row's shared memory (one
block per SM for a row of 128 KB) pays.

A third sketch keeps the row in registers instead: the same cache in `local` scope, whose
threads each keep the elements they load (a thread-private cache, lower/thread_private.py),
16 bytes a load, all of a thread's loads issued before the first pass reads any. It is drawn
where a thread's share can fit (`fits_registers`; states over
`SketchParams.max_row_register_elems` a thread are rejected): a softmax row of 32,768 floats
over a cluster of 8 blocks of 128 threads is 32 floats a thread. It comes twice (with
`SketchParams.stream_reads`): once more with the row read by streaming loads and the output
written by streaming stores, as a row read once and an output written once are, which the
hand-written kernels of long rows do as well (`with_streaming_twin`).
"""

from __future__ import annotations

from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, REDUCE, ROOT
from autosched.sketch.rule_base import Cond, SketchContext, SketchRule
from autosched.sketch.stage_steps import level_names, split_at, split_step_ids
from autosched.sketch.utils import consumers
from autosched.te.dtype import BYTES

# shared memory a block keeps for the reductions' own buffers next to the row
RESERVED_SHARED_BYTES = 1024


def direct_readers(state: State, i: int) -> list[int]:
    """The stages whose op loads stage i's tensor itself (inlined ones included)."""
    op = state.stages[i].op
    return [
        j
        for j, s in enumerate(state.stages)
        if j != i and any(t.op is op for t in getattr(s.op, "input_tensors", ()))
    ]


def is_cross_thread_reduction(state: State, j: int) -> bool:
    return any(it.kind == REDUCE and it.annotation == "threadIdx.x" for it in state.stages[j].iters)


def row_kernel(state: State, i: int) -> tuple[int, str] | None:
    """(root stage, row loop) when every stage that reads placeholder i (through inlined ones)
    is that root or is computed at that loop of it, at least one of them a cross-thread
    reduction and two of them passes over the row; None otherwise."""
    readers = consumers(state, i)
    if len(readers) < 2:
        return None
    attach = {state.stages[j].attach for j in readers if state.stages[j].compute_at == ATTACHED}
    if len(attach) != 1:
        return None
    (point,) = attach
    if point is None:
        return None
    root, row = point
    if state.stages[root].compute_at != ROOT or any(
        j != root and state.stages[j].compute_at != ATTACHED for j in readers
    ):
        return None
    if not any(is_cross_thread_reduction(state, j) for j in readers):
        return None
    return root, row


class RowInSharedMemory(SketchRule):
    """For a placeholder whose readers are one block-per-row kernel (`row_kernel`), read by
    that kernel row by row, whose row fits in the block's shared memory: a shared cache of it
    at the row loop, cut and bound as the output's last axis (the module's description).
    The sketch without the cache is kept too, first."""

    def condition(self, ctx, state, i):
        stage = state.stages[i]
        if not stage.is_placeholder or self.plan(ctx, state, i) is None:
            return Cond.SKIP
        return Cond.APPLY_AND_SKIP_REST  # (the sketch left as it is comes first)

    @staticmethod
    def plan(ctx: SketchContext, state: State, i: int) -> tuple[int, str, int] | None:
        """(root, row loop, the root's split step of its last axis) of the cache, or None."""
        found = row_kernel(state, i)
        if found is None:
            return None
        root, row = found
        out = state.stages[root]
        shape = state.stages[i].op.output(0).shape
        names = [it.name for it in out.iters]
        shared_axes = names.index(row) + 1 if row in names else 0
        ids = split_step_ids(state, root)
        if shared_axes == 0 or len(shape) != shared_axes + 1 or len(ids) != 1:
            return None
        if out.root_iters[-1].name in names:  # the one split is not of the row's last axis
            return None
        room = ctx.hardware.max_shared_memory_per_block_optin - RESERVED_SHARED_BYTES
        if shape[-1] * BYTES[state.stages[i].op.dtype] > room:
            return None
        return root, row, ids[0]

    def apply(self, ctx, state, i):
        planned = self.plan(ctx, state, i)
        assert planned is not None
        root, row, split = planned
        out = [(state, i - 1), (shared_row_cache(state, i, root, row, split), i - 1)]
        if fits_registers(ctx, state, i, parts=1) and loads_row_well(ctx, state, i, split):
            local = shared_row_cache(state, i, root, row, split, "local")
            out += [(s, i - 1) for s in with_streaming_twin(ctx, local, root + 1)]
        return out


def with_streaming_twin(ctx: SketchContext, state: State, root: int) -> list[State]:
    """`state`, and (with `SketchParams.stream_reads`) its twin whose kernel, rooted at stage
    `root`, reads its inputs by streaming (evict-first, `__ldcs`) loads and writes its output
    by streaming stores (`__stcs`): a row kept in registers is read from DRAM once and its
    output written once, so neither's lines need stay in L1 or L2."""
    if not ctx.params.stream_reads:
        return [state]
    return [state, state.pragma(root, 0, "stream_reads", 1).pragma(root, 0, "stream_writes", 1)]


def fits_registers(ctx: SketchContext, state: State, i: int, parts: int) -> bool:
    """Whether 1 / `parts` of placeholder i's row can be kept in registers: at most
    `SketchParams.max_row_register_elems` elements a thread at the most threads a block has
    (the sampled thread count decides the rest: `validity.check_program`)."""
    length = state.stages[i].op.output(0).shape[-1]
    most = ctx.params.max_row_register_elems * ctx.hardware.max_threads_per_block
    return 0 < length // parts <= most


def loads_row_well(ctx: SketchContext, state: State, i: int, thread_split: int) -> bool:
    """Whether the root's thread cut (split step `thread_split`) loads placeholder i's row into
    registers as well as the row allows: where the row divides into 16-byte vectors, only a cut
    that gives each thread vectors ([rest, threads, lanes]) does; the cut without lanes would
    load it 4 bytes at a time, and its twin sketch with lanes keeps the row instead."""
    length = state.stages[i].op.output(0).shape[-1]
    lanes = ctx.params.max_vector_bytes // BYTES[state.stages[i].op.dtype]
    in_vectors = len(split_at(state.steps, thread_split).lengths) > 1
    return in_vectors or lanes <= 1 or length % lanes != 0


def shared_row_cache(
    state: State, i: int, root: int, at: str, thread_split: int, scope: str = "shared"
) -> State:
    """`state` with a cache of placeholder i for its readers, computed at iterator `at` of the
    kernel's root stage (which the cache then precedes), its last axis cut as the root's
    threads are (split step `thread_split`): bound to threadIdx.x, vectorized where the split
    has an inner lane part. The region `at` fixes is what the cache holds: the whole row at the
    row loop, one block's part at a cluster's rank iterator; in shared memory, or with `scope`
    "local" in each thread's registers, each thread keeping the elements it loads
    (a thread-private cache, lower/thread_private.py; sketch/row_in_registers.py)."""
    readers = [j for j in direct_readers(state, i) if not state.stages[j].is_placeholder]
    cached = state.cache_read(i, scope, readers)
    cache = i + 1
    cached = cached.compute_at(cache, root + 1, at)
    last = cached.stages[cache].iters[-1].name
    lanes = split_at(cached.steps, thread_split).lengths
    cached = cached.follow_split(cache, last, thread_split, len(lanes))
    levels = level_names(last, len(lanes) + 1)
    cached = cached.bind(cache, levels[1], "threadIdx.x")
    if len(lanes) > 1:
        cached = cached.vectorize(cache, levels[-1])
    return cached


__all__ = [
    "RESERVED_SHARED_BYTES",
    "fits_registers",
    "loads_row_well",
    "RowInSharedMemory",
    "row_kernel",
    "shared_row_cache",
    "with_streaming_twin",
]
