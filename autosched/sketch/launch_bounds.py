"""Launch bounds that let a reduction kernel of a few hundred blocks run in one wave: the init
rule `LaunchBounds`.

A kernel is printed `__launch_bounds__(threads, min_blocks)`. With min_blocks 1, ptxas may give
each thread as many registers as one block of the kernel can take from an SM's register file: a
block-per-row softmax of 512 threads whose unrolled loops keep 16 vector loads in flight uses
about 128 registers, so one block fits an SM and 256 rows run in two waves on 132 SMs, each
SM streaming its rows with a single block. Asking for ceil(blocks / SMs) blocks per SM caps the
registers so that the whole grid is resident at once (ptxas issues fewer loads ahead, or spills,
which the builder rejects): the search draws either, and measures.

The rule touches only the kernels where the choice exists: a root stage with a cross-thread
reduction (the kernels of normalisations and row reductions, whose few long rows give a grid
of one to a few blocks per SM) whose grid is larger than the SM count and could be resident
at once (threads and blocks per SM). It runs after every other init rule, so the other rules'
draws stay what they were, and it gives every such kernel the pragma (1 or the one-wave count),
so both choices are one sketch's decisions.
"""

from __future__ import annotations

import math

from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, CLUSTER_RANK_TAG, REDUCE, ROOT
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.utils import (
    direct_producers,
    has_cross_thread_reduction,
    is_inlined,
    row_part_in_registers,
)
from autosched.te.dtype import BYTES
from measure.hardware import HardwareParams

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
PRAGMA = "launch_min_blocks"


def kernel_stages(state: State, root: int) -> list[int]:
    """Root stage `root` and every stage computed inside it (at any depth)."""
    inside = [root]
    for j in inside:
        inside += [
            k
            for k, s in enumerate(state.stages)
            if s.compute_at == ATTACHED and s.attach is not None and s.attach[0] == j
        ]
    return inside


def launch_shape(state: State, root: int) -> tuple[int, int]:
    """(blocks, threads per block) of root stage `root`'s kernel: the product of its iterators
    bound to blockIdx or to the cluster rank (each row's blocks of a cluster,
    sketch/row_cluster.py), and of the largest extent each threadIdx tag has inside the kernel."""
    blocks = math.prod(
        it.extent or 1
        for it in state.stages[root].iters
        if it.annotation in (*BLOCK_TAGS, CLUSTER_RANK_TAG)
    )
    threads = dict.fromkeys(THREAD_TAGS, 1)
    for j in kernel_stages(state, root):
        for it in state.stages[j].iters:
            if it.annotation in threads:
                threads[it.annotation] = max(threads[it.annotation], it.extent or 1)
    return blocks, math.prod(threads.values())


def unrolled_reduction_steps(state: State, root: int) -> int:
    """The most reduction steps one thread of root stage `root`'s kernel takes in a loop nest
    that `auto_unroll_max_step` unrolls whole (0 when none is): ptxas issues all their loads
    at once, a register each (a float), so they bound what a register cap leaves room for."""
    most = 0
    for j in kernel_stages(state, root):
        stage = state.stages[j]
        reduce = [it for it in stage.iters if it.kind == REDUCE]
        if not any(it.annotation in THREAD_TAGS for it in reduce):
            continue  # no cross-thread reduction
        own = math.prod(
            it.extent or 1
            for it in reduce
            if it.annotation not in (*THREAD_TAGS, CLUSTER_RANK_TAG)  # the rank: no loop
        )
        if own <= stage.auto_unroll_max_step:
            most = max(most, own)
    return most


def row_cache_bytes(state: State, root: int) -> int:
    """The shared memory of the rows root stage `root`'s kernel keeps (row_in_shared.py): for
    each shared stage attached at one of the root's loops, the elements of its tensor past the
    axes that loop and those outside it fix; at the cluster rank (a block's part of the rows,
    sketch/row_cluster.py), 1 / C of those the loop outside it fixes."""
    its = state.stages[root].iters
    names = [it.name for it in its]
    total = 0
    for j in kernel_stages(state, root)[1:]:
        stage = state.stages[j]
        if stage.scope != "shared" or stage.attach is None or stage.attach[0] != root:
            continue
        shape = stage.op.output(0).shape
        at, parts = names.index(stage.attach[1]), 1
        if its[at].annotation == CLUSTER_RANK_TAG:
            at, parts = at - 1, its[at].extent or 1
        total += math.prod(shape[at + 1 :]) * BYTES[stage.op.dtype] // parts
    return total


# registers a thread of a row kernel takes besides the row elements it keeps in registers
# (addresses, indices, the reductions' accumulators)
ROW_KERNEL_REGISTERS = 24
# registers a thread of a row kernel takes for each input it reads besides the row (a
# layer norm's gamma and beta): ptxas issues the unrolled output loop's vector loads of them
# ahead, with the row's registers live
INPUT_REGISTERS = 8


def row_thread_registers(kept: int, other_inputs: int) -> int:
    """The registers a thread of a row kernel takes that keeps `kept` elements of its row in
    registers and reads `other_inputs` inputs besides the row."""
    return kept + ROW_KERNEL_REGISTERS + INPUT_REGISTERS * other_inputs


def other_inputs(state: State, root: int) -> int:
    """How many placeholders root stage `root`'s kernel reads besides its row (the first)."""
    read = {
        p
        for j in kernel_stages(state, root)
        for p in direct_producers(state, j)
        if state.stages[p].is_placeholder
    }
    return max(0, len(read) - 1)


def row_register_elems(state: State, root: int) -> int:
    """The elements of the rows each thread of root stage `root`'s kernel keeps in registers
    (thread-private caches, `utils.row_part_in_registers`), over the block's threads."""
    threads = launch_shape(state, root)[1]
    return sum(
        -(-row_part_in_registers(state, j) // threads) for j in kernel_stages(state, root)[1:]
    )


def fits_blocks(state: State, root: int, hardware: HardwareParams, count: int) -> bool:
    """Whether `count` blocks of root stage `root`'s kernel fit an SM's thread, block and
    shared memory limits (the rows the kernel keeps in shared memory) and leave each thread
    at least the registers its kernel's wholly unrolled reduction steps take, and those of
    the row elements it keeps in registers with those of its other inputs' loads, as
    `validity.fits_row_registers` counts them (a cap below those would surely spill; the
    builder rejects those that spill all the same)."""
    threads = launch_shape(state, root)[1]
    kept = row_register_elems(state, root)
    limit = hardware.registers_per_thread_limit(count * threads)
    need = row_thread_registers(kept, other_inputs(state, root))
    return not (
        count > hardware.max_blocks_per_sm
        or count * threads > hardware.max_threads_per_sm
        or count * row_cache_bytes(state, root) > hardware.max_shared_memory_per_sm
        or unrolled_reduction_steps(state, root) > limit
        or (kept and need > limit)
    )


def one_wave_blocks(state: State, root: int, hardware: HardwareParams) -> int:
    """The blocks per SM that make root stage `root`'s grid resident at once: ceil(blocks /
    SMs) when that is 2 or more and fits (`fits_blocks`); else 1 (one wave already, or
    never)."""
    blocks = launch_shape(state, root)[0]
    need = -(-blocks // hardware.num_sms)
    return need if need >= 2 and fits_blocks(state, root, hardware, need) else 1


def cluster_blocks(state: State, root: int, hardware: HardwareParams) -> int:
    """For a kernel whose rows are split over thread-block clusters (sketch/row_cluster.py)
    and whose grid cannot be resident at once: the most blocks per SM below the one-wave
    count that fit (`fits_blocks`), 2 or more; else 1. With 1, ptxas may give a thread of a
    row kept in registers far more registers than the row takes, and fewer of the clusters'
    blocks then share an SM, overlapping one block's loads with another's exchange."""
    if not any(it.annotation == CLUSTER_RANK_TAG for it in state.stages[root].iters):
        return 1
    blocks = launch_shape(state, root)[0]
    need = -(-blocks // hardware.num_sms)
    for count in range(min(need - 1, hardware.max_blocks_per_sm), 1, -1):
        if fits_blocks(state, root, hardware, count):
            return count
    return 1


class LaunchBounds(InitRule):
    """For each kernel of a cross-thread reduction whose grid fills an SM more than once but
    could be resident at once, `launch_min_blocks` of 1 or of the one-wave count
    (`one_wave_blocks`), with even odds, on its root stage (the module's description); for a
    kernel over clusters that cannot be, 1 or the most blocks per SM that fit
    (`cluster_blocks`)."""

    def apply(self, ctx, plan, state, rng):
        if not ctx.params.one_wave_launch_bounds:
            return state
        for i, stage in enumerate(state.stages):
            if (
                stage.is_placeholder
                or is_inlined(stage)
                or stage.compute_at != ROOT
                or not has_cross_thread_reduction(state, i)
            ):
                continue
            need = one_wave_blocks(state, i, ctx.hardware)
            if need == 1:
                need = cluster_blocks(state, i, ctx.hardware)
            if need > 1:
                state = state.pragma(i, 0, PRAGMA, pick((1, need), rng))
        return state


__all__ = [
    "INPUT_REGISTERS",
    "PRAGMA",
    "LaunchBounds",
    "cluster_blocks",
    "fits_blocks",
    "kernel_stages",
    "launch_shape",
    "one_wave_blocks",
    "row_thread_registers",
    "row_cache_bytes",
    "row_register_elems",
    "unrolled_reduction_steps",
]
