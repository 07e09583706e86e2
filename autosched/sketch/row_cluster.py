"""Long rows split over a thread-block cluster (Hopper, sm_90): the sketch rule `RowOverCluster`.

A block-per-row normalisation (softmax, layer norm in either form, RMSNorm: CrossThreadReduction
computes its reductions at the output's row loop) with few long rows keeps one block busy per row:
128 rows of 65,536 floats leave an H100 with one 512-thread block per SM, which cannot keep enough
loads in flight to read DRAM at its peak, and 256 rows of 32,768 floats a block per SM that reduces
while the DRAM idles. This rule splits each row over a cluster of C blocks (C in
`SketchParams.row_cluster_sizes`): the output's loop over its row, outside the threads, is cut [C,
rest] with the C part bound to the block's rank in its cluster (`CLUSTER_RANK_TAG`), and each
reduction computed at the row loop is cut the same way. Each block then reads its 1 / C of the row,
reduces it over its threads, and the C blocks exchange their partial results through distributed
shared memory after a cluster barrier (lower/cross_thread.py `cluster_exchange`), so every block
holds the row's statistics and normalises its part: C times the blocks, each with 1 / C of the row.
A cluster of 16 blocks, above the portable 8 (its launch opts in: `measure.cluster_size`), is drawn
only for rows too few to give every SM a second block with clusters of 8 (`wants_non_portable`): 16
rows of 262,144 floats make 128 blocks of a cluster of 8, one per SM, and 256 of a cluster of 16. A
second sketch per C reads each block's part once from DRAM into shared memory, where every pass then
reads it (`part_in_shared`, as RowInSharedMemory keeps a whole row); the first leaves the later
passes to find the part in L1 or L2. Where a thread's share of the part can fit in registers
(`fits_registers`), a third keeps it there (with its streaming twin), and where the row has
operands (a layer norm's gamma and beta, an RMSNorm's weight) whose parts fit beside it, a fourth,
streaming, keeps those in registers too (`operands_in_registers`): every load of the kernel is then
issued before its reduction, and nothing waits on L2 after the cluster exchange, as in the
hand-written long-row kernels.

The rule applies where the GPU has clusters (sm_90 or later), the kernel is a block-per-row
kernel whose stages computed at the row loop are all cross-thread reductions (no row kept in
shared memory) with at most `MAX_ROWS_PER_SM` rows per SM, the row divides into C parts of at
least `MIN_PART_ELEMENTS`, and a part fits a block's share of an SM's shared memory at two
blocks per SM (where a later rule may keep it), for the first two sketches, or a thread's share
of it fits in registers, for the third and fourth. It adds up to five sketches per C and keeps the
unsplit sketch (APPLY). Off where `row_cluster_sizes` is empty (the default is 2, 4, 8 and 16).
"""

from __future__ import annotations

from typing import ClassVar

from autosched.lower.cluster_ir import PORTABLE_CLUSTER_SIZE
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, CLUSTER_RANK_TAG, REDUCE, SPATIAL
from autosched.sketch.row_in_shared import (
    RESERVED_SHARED_BYTES,
    direct_readers,
    fits_registers,
    is_cross_thread_reduction,
    loads_row_well,
    row_kernel,
    shared_row_cache,
    with_streaming_twin,
)
from autosched.sketch.rule_base import Cond, SketchContext, SketchRule
from autosched.sketch.stage_steps import split_step_ids
from autosched.te.dtype import BYTES
from measure.hardware import HardwareParams

# the first GPU architecture with thread-block clusters
CLUSTER_ARCH = 90


def has_clusters(hardware: HardwareParams) -> bool:
    """Whether the GPU launches thread-block clusters (sm_90 or later)."""
    digits = hardware.arch.removeprefix("sm_").rstrip("a")
    return digits.isdigit() and int(digits) >= CLUSTER_ARCH


def row_stages(state: State, root: int, row: str) -> list[int]:
    """The stages computed at root stage `root`'s loop `row`."""
    return [
        j
        for j, s in enumerate(state.stages)
        if s.compute_at == ATTACHED and s.attach == (root, row)
    ]


def outer_row_iter(state: State, i: int, at: int, kind: str) -> str | None:
    """The name of stage i's iterator `at` when it is of `kind`, unbound, and a later iterator
    of that kind is bound to threadIdx.x (it is the loop over the row outside the threads;
    a moments axis may lie between); None otherwise."""
    its = state.stages[i].iters
    if at >= len(its) or its[at].kind != kind or its[at].annotation != "none":
        return None
    later = [it for it in its[at + 1 :] if it.kind == kind]
    if not any(it.annotation == "threadIdx.x" for it in later):
        return None
    return its[at].name


class RowOverCluster(SketchRule):
    """For a placeholder read by one block-per-row kernel: that kernel's rows split over
    clusters of C blocks, one sketch per C that fits (the module's description)."""

    # the fewest elements of a row one block of the cluster keeps
    MIN_PART_ELEMENTS: ClassVar[int] = 512
    # rows per SM above which a block per row already fills every SM several times over, so
    # splitting rows only adds cluster barriers (and sketches for the search to tell apart)
    MAX_ROWS_PER_SM: ClassVar[int] = 2

    def condition(self, ctx, state, i):
        if not state.stages[i].is_placeholder or not self.sizes(ctx, state, i):
            return Cond.SKIP
        return Cond.APPLY

    @staticmethod
    def plan(state: State, i: int) -> tuple[int, int, list[tuple[int, str]]] | None:
        """(the row's length, the rows, [(stage, iterator to cut)]: the kernel's root and each
        stage computed at its row loop) when placeholder i's readers form a block-per-row kernel
        whose row stages are all cross-thread reductions; None otherwise."""
        found = row_kernel(state, i)
        if found is None:
            return None
        root, row = found
        out = state.stages[root]
        names = [it.name for it in out.iters]
        if row not in names or len(split_step_ids(state, root)) != 1:
            return None
        if any(it.annotation == CLUSTER_RANK_TAG for it in out.iters):
            return None
        at = names.index(row) + 1
        cut = outer_row_iter(state, root, at, SPATIAL)
        if cut is None:
            return None
        cuts = [(root, cut)]
        for j in row_stages(state, root, row):
            if not is_cross_thread_reduction(state, j):
                return None
            its = state.stages[j].iters
            first = next(k for k, it in enumerate(its) if it.kind == REDUCE)
            reduce_cut = outer_row_iter(state, j, first, REDUCE)
            if reduce_cut is None:
                return None
            cuts.append((j, reduce_cut))
        if len(cuts) < 2:
            return None
        length = out.root_iters[-1].extent
        rows = 1
        for it in out.root_iters[:-1]:
            rows *= it.extent or 1
        return (length or 0), rows, cuts

    def sizes(self, ctx: SketchContext, state: State, i: int) -> list[int]:
        """The cluster sizes of `SketchParams.row_cluster_sizes` that fit placeholder i's row
        kernel (none where there is none, or the GPU has no clusters): its part in shared
        memory (`fits_shared`) or in registers (`fits_registers`); above the portable size
        only for rows that want it (`wants_non_portable`)."""
        if not ctx.params.row_cluster_sizes or not has_clusters(ctx.hardware):
            return []
        planned = self.plan(state, i)
        if planned is None:
            return []
        length, rows, _ = planned
        hardware = ctx.hardware
        if rows > self.MAX_ROWS_PER_SM * hardware.num_sms:
            return []
        return [
            c
            for c in ctx.params.row_cluster_sizes
            if (c <= PORTABLE_CLUSTER_SIZE or self.wants_non_portable(rows, hardware))
            and length % c == 0
            and length // c >= self.MIN_PART_ELEMENTS
            and (self.fits_shared(ctx, state, i, c) or fits_registers(ctx, state, i, parts=c))
        ]

    @staticmethod
    def wants_non_portable(rows: int, hardware: HardwareParams) -> bool:
        """Whether `rows` split over the largest portable cluster leave each SM at most one
        block: only then does a larger cluster add blocks the SMs have room for (more loads in
        flight per SM) rather than cluster barriers."""
        return rows * PORTABLE_CLUSTER_SIZE <= hardware.num_sms

    @staticmethod
    def fits_shared(ctx: SketchContext, state: State, i: int, parts: int) -> bool:
        """Whether 1 / `parts` of placeholder i's row fits a block's share of an SM's shared
        memory at two blocks per SM, next to the reductions' own buffers."""
        hardware = ctx.hardware
        share = min(
            hardware.max_shared_memory_per_sm // 2, hardware.max_shared_memory_per_block_optin
        )
        share -= RESERVED_SHARED_BYTES
        length = state.stages[i].op.output(0).shape[-1]
        return length // parts * BYTES[state.stages[i].op.dtype] <= share

    def apply(self, ctx, state, i):
        planned = self.plan(state, i)
        assert planned is not None
        _, _, cuts = planned
        out = []
        for c in self.sizes(ctx, state, i):
            split = state
            for stage, name in cuts:
                split = split.split(stage, name, [c], inner_to_outer=False)
                split = split.bind(stage, f"{name}_o", CLUSTER_RANK_TAG)
            if self.fits_shared(ctx, state, i, c):
                out += [(split, i - 1), (self.part_in_shared(split, i, cuts), i - 1)]
            thread_split = split_step_ids(state, cuts[0][0])[0]
            if fits_registers(ctx, state, i, c) and loads_row_well(ctx, state, i, thread_split):
                local = self.part_in_shared(split, i, cuts, "local")
                twins = with_streaming_twin(ctx, local, cuts[0][0] + 1)
                out += [(s, i - 1) for s in twins]
                rank_iter = f"{cuts[0][1]}_o"
                operands = operands_in_registers(
                    ctx, twins[-1], i, cuts[0][0] + 1, rank_iter, thread_split, c
                )
                out += [(operands, i - 1)] if operands is not None else []
        return out

    @staticmethod
    def part_in_shared(
        state: State, i: int, cuts: list[tuple[int, str]], scope: str = "shared"
    ) -> State:
        """The cluster sketch `state` with each block's part of the row read once into shared
        memory (or, `scope` "local", into its threads' registers): the reductions computed at
        the output's rank iterator (which runs once, so nothing changes), and there a cache of
        placeholder i, whose region is then the block's part only (the rank fixed there), cut
        and bound as the output's threads, as RowInSharedMemory cuts the whole row's."""
        (root, root_cut), *reductions = cuts
        rank_iter = f"{root_cut}_o"
        for j, _ in reductions:
            state = state.compute_at(j, root, rank_iter)
        split = split_step_ids(state, root)[0]
        return shared_row_cache(state, i, root, rank_iter, split, scope)


def row_operands(state: State, i: int, root: int) -> list[str]:
    """The names of the placeholders other than i that only root stage `root` reads, each a
    vector along placeholder i's row (a layer norm's gamma and beta, an RMSNorm's weight)."""
    length = state.stages[i].op.output(0).shape[-1]
    return [
        st.name
        for j, st in enumerate(state.stages)
        if j != i
        and st.is_placeholder
        and tuple(st.op.output(0).shape) == (length,)
        and [k for k in direct_readers(state, j) if not state.stages[k].is_placeholder] == [root]
    ]


def operands_in_registers(
    ctx: SketchContext, state: State, i: int, root: int, at: str, thread_split: int, parts: int
) -> State | None:
    """Register sketch `state` (placeholder i's part cached in registers at root stage `root`'s rank
    iterator `at`) with the row's operands (`row_operands`) cached there too, each thread keeping
    the elements it multiplies by: all of a thread's loads are issued before the reduction, as the
    hand-written kernels' are, and none waits after the cluster exchange. None where the row has no
    operands, or a block's part of it and of them cannot fit its threads' registers together
    (as `fits_registers` counts the row's alone)."""
    names = row_operands(state, i, root)
    length = state.stages[i].op.output(0).shape[-1]
    most = ctx.params.max_row_register_elems * ctx.hardware.max_threads_per_block
    if not names or (1 + len(names)) * (length // parts) > most:
        return None
    for name in names:  # each cache goes before the root, which moves on by one
        j = [st.name for st in state.stages].index(name)
        state = shared_row_cache(state, j, root, at, thread_split, "local")
        root += 1
    return state


__all__ = ["RowOverCluster", "has_clusters", "operands_in_registers", "row_operands"]
