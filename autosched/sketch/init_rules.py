"""Random annotation: from a sketch to a complete, launchable State (Ansor's init population).

`SketchPlan` (plan.py) is what a sketch's structure says once (its unknown splits, its tiled
stages and their shared-memory caches); the init rules, in `GPU_INIT_RULES` order, then make
the random decisions for one state:

  FillTileSize    perfect tile sizes for every unknown split, resampled per tiled stage until
                  the thread / vthread / register / shared-memory estimates fit the GPU; a
                  thread count (a multiple of the warp size) for cross-thread reductions
  FillTensorCore  warps, repeats, K chunk and cooperative fetching of Tensor Core stages
                  (tensor_core_init.py); ThreadBind leaves the roots their sketch bound
  ThreadBind      blockIdx.x / vthread / threadIdx.x for tiled stages, blockIdx.x for the outer
                  loops of cross-thread reductions, fuse-split-bind for the other root stages,
                  cooperative fetching (vectorised) for shared caches
  SharedPadding   the rows of shared caches of tiled stages padded against bank conflicts, or
                  not (shared_padding.py; after ThreadBind, whose fetch vectors it keeps aligned)
  DoubleBuffer    the shared caches of an attach loop fetched one iteration ahead, or not
                  (double_buffer.py)
  AutoUnroll      auto_unroll_max_step on every stage with a reduction (and on the one that
                  sums a cross-block reduction's parts)
  TensorCoreInstruction  wmma or ldmatrix + mma.sync for each 16-bit Tensor Core stage
                  (tensor_core_instruction.py)
  PipelineStages  2 to 5 shared-memory slots for a double-buffered Tensor Core stage
                  (pipeline_stages.py)
  FragmentDoubleBuffer  two register slots for an mma stage's operand fragments
                  (fragment_double_buffer.py)
  OperandCopy     cp.async or TMA for a pipelined wgmma stage's shared operand tiles
                  (operand_copy.py)
  WarpSpecialize  a producer warpgroup for a TMA-fed wgmma stage (warp_specialize.py)
  EpilogueVector  16-byte vectors or single elements for the copy-out of a wgmma or mma stage's
                  epilogue on sm_90 (epilogue_vector.py)
  LaunchBounds    the blocks per SM a cross-thread reduction's `__launch_bounds__` asks for,
                  1 or enough for one wave (launch_bounds.py); the rules from
                  TensorCoreInstruction on come last, so the other rules' draws are unchanged
  OnlineExchange  a softmax over a cluster: its max and sum exchanged one after the other or
                  as (max, sum) pairs at once (online_exchange.py); last, for the same reason
  FastExp         a kernel keeping its rows in registers: exact or fast float32 exponentials
                  (fast_exp.py); after OnlineExchange, for the same reason
  SinglePass      a cross-block reduction: its parts summed by a second kernel or by the last
                  block of the first (single_pass.py); last, for the same reason

A rule that cannot make a valid state raises `Rejected(reason)` (validity.py); the sampler counts
the reasons.
"""

from __future__ import annotations

import functools
import math
import random

from autosched.schedule.loop_state import State
from autosched.schedule.stage import ROOT, SPATIAL
from autosched.schedule.steps import SplitStep, replay
from autosched.sketch.double_buffer import DoubleBuffer
from autosched.sketch.epilogue_vector import EpilogueVector
from autosched.sketch.factorization import factorization_schemes, pick, tiling_extents
from autosched.sketch.fast_exp import FastExp
from autosched.sketch.fragment_double_buffer import FragmentDoubleBuffer
from autosched.sketch.init_base import InitContext, InitRule
from autosched.sketch.launch_bounds import LaunchBounds
from autosched.sketch.online_exchange import OnlineExchange
from autosched.sketch.operand_copy import OperandCopy
from autosched.sketch.parts_in_consumer import sums_parts_inside
from autosched.sketch.pipeline_stages import PipelineStages
from autosched.sketch.plan import SketchPlan, TileGroup
from autosched.sketch.shared_padding import SharedPadding
from autosched.sketch.single_pass import SinglePass
from autosched.sketch.stage_steps import split_at
from autosched.sketch.tensor_core_init import (
    FillTensorCore,
    reserved_stages,
    tensor_core_unroll_options,
)
from autosched.sketch.tensor_core_instruction import TensorCoreInstruction
from autosched.sketch.thread_work import split_repeats, vectorize_window
from autosched.sketch.utils import (
    has_cross_thread_reduction,
    has_reduce_iter,
    is_inlined,
    vector_lanes,
)
from autosched.sketch.validity import Reason, Rejected, tile_sizes
from autosched.sketch.warp_specialize import WarpSpecialize
from autosched.te.dtype import BYTES


@functools.cache
def thread_count_options(
    reduction: int, counts: tuple[int, ...], warp_size: int, max_threads: int
) -> tuple[int, ...]:
    """Thread counts for a cross-thread reduction of length `reduction`: the multiples of the
    warp size in `counts` within the block limit, up to the first that covers the reduction
    (larger ones would only add idle threads)."""
    out: list[int] = []
    for c in sorted(counts):
        if c % warp_size or c > max_threads:
            continue
        out.append(c)
        if c >= reduction:
            break
    return tuple(out) or (warp_size,)


@functools.cache
def _spatial_options(
    extent: int,
    n: int,
    max_innermost: int,
    max_vthread: int,
    max_threads: int,
    max_local: int,
    min_threads: int = 1,
) -> tuple:
    """The factorisations of a spatial axis (vthread, thread, inner... lengths) that fit alone,
    of the extent or its padded extent (`tiling_extents`)."""
    return tuple(
        lens
        for padded in tiling_extents(extent)
        for lens in factorization_schemes(padded, n, max_innermost)
        if lens[0] <= max_vthread
        and min_threads <= lens[1] <= max_threads
        and lens[0] * math.prod(lens[2:]) <= max_local
    )


def accumulators(sp: list) -> int:
    """The local accumulators of one thread of a tiled stage, from its spatial lengths
    (vthread, thread, inner...): one inner tile per virtual thread."""
    return math.prod(lens[0] * math.prod(lens[2:]) for lens in sp)


class FillTileSize(InitRule):
    """Perfect tile sizes, uniformly from each extent's factorisations. A tiled stage's sizes
    are drawn together and redrawn until its estimates fit: vthread extent, threads per block
    (at least a warp unless the stage is smaller), registers per thread and shared memory.

    The spatial axes are drawn one after the other (in a random order), each from the
    factorisations that fit in the budget the others left, so the upper limits always hold and
    only the lower thread count and shared memory need redraws."""

    def options(self, ctx: InitContext, step: SplitStep, spatial: bool) -> tuple:
        p, hw = ctx.params, ctx.hardware
        if not spatial:
            return factorization_schemes(
                step.extent, len(step.lengths), p.max_innermost_split_factor
            )
        return _spatial_options(
            step.extent,
            len(step.lengths),
            p.max_innermost_split_factor,
            hw.max_vthread_extent,
            hw.max_threads_per_block,
            p.max_local_elems,
        )

    def draw_spatial(self, ctx: InitContext, steps: list, g: TileGroup, rng: random.Random):
        """Lengths for each spatial axis, drawn in a random axis order, each from the
        factorisations that fit in what the axes drawn before left of the vthread, thread and
        register budgets (the last axis also brings the threads up to the minimum). None when
        some axis has no option left."""
        p, hw = ctx.params, ctx.hardware
        ids = g.spatial_ids
        order = list(range(len(ids)))
        rng.shuffle(order)
        vthread, threads = hw.max_vthread_extent, hw.max_threads_per_block
        local, have = self.local_budget(ctx, steps, g), 1
        out: list = [None] * len(ids)
        for n, a in enumerate(order):
            step = steps[ids[a]]
            need = -(-g.min_threads // have) if n == len(order) - 1 else 1
            opts = _spatial_options(
                step.extent,
                len(step.lengths),
                p.max_innermost_split_factor,
                vthread,
                threads,
                local,
                need,
            )
            if not opts:
                return None
            lens = out[a] = pick(opts, rng)
            vthread //= lens[0]
            threads //= lens[1]
            have *= lens[1]
            local //= lens[0] * math.prod(lens[2:])
        return out

    @staticmethod
    def local_budget(ctx: InitContext, steps: list, g: TileGroup) -> int:
        """Accumulators one thread of the stage may hold: `max_local_elems`, and few enough
        that the stage launches `min_threads_per_sm` threads per SM (threads in all are its
        outputs over a thread's accumulators), but at least one."""
        p = ctx.params
        wanted = p.min_threads_per_sm * ctx.hardware.num_sms
        if not wanted:
            return p.max_local_elems
        outputs = math.prod(steps[k].extent for k in g.spatial_ids)
        return max(1, min(p.max_local_elems, outputs // wanted))

    def check_group(self, ctx: InitContext, g: TileGroup, sp: list, rd: list) -> Reason | None:
        hw, params = ctx.hardware, ctx.params
        vthread = math.prod(lens[0] for lens in sp)
        threads = math.prod(lens[1] for lens in sp)
        if vthread > hw.max_vthread_extent:
            return Reason.VTHREAD
        if threads > hw.max_threads_per_block:
            return Reason.THREADS_PER_BLOCK
        if threads < g.min_threads:
            return Reason.TOO_FEW_THREADS
        if accumulators(sp) > params.max_local_elems:
            return Reason.LOCAL_MEMORY
        # The accumulators get at most half the registers of a thread; more spills almost
        # always (measured with ptxas on the suite). Every virtual thread's accumulators stay
        # live across the reduction loop (vthread injection), so all of them count.
        if accumulators(sp) > hw.registers_per_thread_limit(threads) // 2:
            return Reason.REGISTERS
        if g.footprints:
            tile = [math.prod(lens) for lens in sp] + [math.prod(lens) for lens in rd]
            if sum(fp.bytes(tile) for fp in g.footprints) > hw.max_shared_memory_per_block:
                return Reason.SHARED_MEMORY
        return None

    def fill(self, ctx: InitContext, plan: SketchPlan, rng: random.Random) -> list:
        steps = list(plan.sketch.steps)
        for g in plan.groups:
            rd_opts = [self.options(ctx, split_at(steps, k), False) for k in g.reduce_ids]
            reason = Reason.NO_OPTION
            for _ in range(ctx.params.tile_retries):
                sp = self.draw_spatial(ctx, steps, g, rng)
                rd = [pick(o, rng) for o in rd_opts]
                broken = self.check_group(ctx, g, sp, rd) if sp is not None else Reason.NO_OPTION
                if broken is None:
                    break
                reason = broken
            else:
                raise Rejected(tile_sizes(reason))
            for k, lens in zip(g.spatial_ids + g.reduce_ids, sp + rd, strict=True):
                s = split_at(steps, k)
                steps[k] = SplitStep(s.stage_id, s.iter_id, s.extent, lens, s.inner_to_outer)
        for k in plan.unknown:
            s = split_at(steps, k)
            if k in plan.cross_thread:
                fewest = plan.min_threads.get(k, 1)
                lengths = self.thread_count(ctx, s, plan.cross_thread[k], rng, fewest)
            else:
                lengths = pick(self.options(ctx, s, False), rng)
            steps[k] = SplitStep(s.stage_id, s.iter_id, s.extent, lengths, s.inner_to_outer)
        return steps

    @staticmethod
    def thread_count(
        ctx: InitContext, s: SplitStep, reduction: int, rng: random.Random, fewest: int = 1
    ) -> tuple:
        """The lengths of a cross-thread reduction's split: its unknown length (the thread
        count) drawn, a known one (a vector of reduction steps per thread) kept. A count below
        `fewest` is drawn only where no other is offered (a row kept in registers needs that
        many threads to fit: `SketchPlan.min_threads`)."""
        hw = ctx.hardware
        per_thread = math.prod(n for n in s.lengths if n is not None)
        options = thread_count_options(
            -(-reduction // per_thread),
            ctx.params.cross_thread_counts,
            hw.warp_size,
            hw.max_threads_per_block,
        )
        options = tuple(c for c in options if c >= fewest) or options
        return tuple(pick(options, rng) if n is None else n for n in s.lengths)

    def apply(self, ctx, plan, state, rng):
        return replay(state.dag, self.fill(ctx, plan, rng))


class ThreadBind(InitRule):
    """GPU thread binding (Ansor's InitThreadBind)."""

    def apply(self, ctx, plan, state, rng):
        roots = plan.tiled_roots
        tiled = {g.tiled: g for g in plan.groups}
        reserved = reserved_stages(plan.tensor_core)
        for i in range(len(state.stages) - 1, -1, -1):
            stage = state.stages[i]
            if stage.is_placeholder or is_inlined(stage) or i in reserved:
                continue
            if stage.compute_at == ROOT and has_cross_thread_reduction(state, i):
                state = self.bind_cross_thread(state, i)
            elif stage.compute_at == ROOT and i in roots:
                state = self.bind_tiled(ctx, state, i, roots[i])
            elif stage.compute_at == ROOT:
                state = self.bind_simple(ctx, state, i, rng)
            elif stage.scope == "shared" and stage.attach is not None and stage.attach[0] in tiled:
                state = self.cooperative_fetch(ctx, state, i, tiled[stage.attach[0]], rng)
        return state

    @staticmethod
    def _fuse_bind(state: State, i: int, first: int, n: int, thread: str) -> State:
        if n > 1:
            state = state.fuse(i, list(range(first, first + n)))
        return state.bind(i, first, thread)

    def bind_tiled(self, ctx, state, i, g: TileGroup) -> State:
        n = len(g.spatial_ids)
        for level, thread in enumerate(("blockIdx.x", "vthread", "threadIdx.x")):
            state = self._fuse_bind(state, i, level, n, thread)
        return state

    @staticmethod
    def bind_cross_thread(state: State, i: int) -> State:
        """A root stage whose threads share reductions (its own or those computed at it): its
        outer spatial loops, up to the one other stages are computed at, fused on blockIdx.x
        (Ansor's FuseAllOuterSpaceIterators)."""
        at = {s.attach[1] for s in state.stages if s.attach is not None and s.attach[0] == i}
        n = 0
        for it in state.stages[i].iters:
            if it.kind != SPATIAL or it.annotation != "none":
                break
            n += 1
            if it.name in at:
                break
        if n == 0:
            return state
        return ThreadBind._fuse_bind(state, i, 0, n, "blockIdx.x")

    def bind_simple(self, ctx, state, i, rng) -> State:
        """Fuse the leading spatial loops, split by a thread count, bind block and thread. An
        element-wise stage whose loops are all fused (nothing inside, nothing computed at it)
        may also give each thread a vector of consecutive elements (16 bytes of its widest
        element, when they divide the loop), drawn against none: one vector store, and vector
        loads where its reads are contiguous. A large stage may give each thread several
        elements or vectors a block's width apart, and a pooling may read each window row as
        a vector (thread_work.py)."""
        stage = state.stages[i]
        n = 0
        its = stage.iters
        while n < len(its) and its[n].kind == SPATIAL and its[n].annotation == "none":
            n += 1
        if n == 0:
            raise Rejected(Reason.NO_SPATIAL_LOOP, stage.name)
        if n > 1:
            state = state.fuse(i, list(range(n)))
        extent = state.stages[i].iters[0].extent
        lanes = self.element_vector(ctx, state, i, n == len(its), extent)
        if lanes > 1:
            lanes = pick((1, lanes), rng)
        most = min(extent // lanes, ctx.hardware.max_threads_per_block)
        options = [t for t in ctx.params.thread_counts if t <= most]
        if not options:
            return state.bind(i, 0, "threadIdx.x")
        state = split_repeats(ctx, state, i, pick(options, rng), lanes, rng)
        return vectorize_window(ctx, state, i, rng)

    @staticmethod
    def element_vector(ctx, state: State, i: int, whole: bool, extent: int) -> int:
        """Lanes of the vector a thread of element-wise stage i may take (1: none): the
        stage's loops all fused (`whole`), no reduction, no stage computed at it, and the
        lanes dividing the fused extent."""
        stage = state.stages[i]
        if not whole or has_reduce_iter(stage):
            return 1
        if any(s.attach is not None and s.attach[0] == i for s in state.stages):
            return 1
        lanes = vector_lanes(stage, ctx.params.max_vector_bytes)
        return lanes if extent % lanes == 0 and extent > lanes else 1

    def cooperative_fetch(self, ctx, state, i, g: TileGroup, rng) -> State:
        """All threads of the block copy the tile: fuse, split off a vector, follow the
        consumer's thread count, bind threadIdx.x."""
        stage = state.stages[i]
        n = len(stage.iters)
        if n > 1:
            state = state.fuse(i, list(range(n)))
        nbytes = BYTES.get(stage.op.dtype, 4)
        vectors = [
            v for v in ctx.params.vector_lengths if v * nbytes <= ctx.params.max_vector_bytes
        ]
        state = state.split(i, 0, [pick(vectors, rng)])
        state = state.vectorize(i, 1)
        state = state.follow_fused_split(i, 0, g.spatial_ids, 1, True)
        return state.bind(i, 1, "threadIdx.x")


class AutoUnroll(InitRule):
    """auto_unroll_max_step, drawn from the GPU configs (a Tensor Core stage's from its own),
    on every stage with a reduction, and on the element-wise stage inside which a cross-block
    reduction's parts are summed (parts_in_consumer.py: its steps' loads then issue together).

    For a tiled stage only the configs whose unrolled inner loops fit in the registers are
    drawn: nvcc hoists the shared-memory loads of a fully unrolled nest, so the accumulators
    plus the operand tiles of that nest must fit in what ptxas can give a thread (a larger
    unroll spills).
    The estimate is an upper bound that rejects some depths which compile clean."""

    def apply(self, ctx, plan, state, rng):
        configs = ctx.params.auto_unroll_configs
        tiled = {g.tiled: g for g in plan.groups}
        tensor_core = {g.acc: g for g in plan.tensor_core}
        for i, stage in enumerate(state.stages):
            if stage.is_placeholder or is_inlined(stage):
                continue
            if not has_reduce_iter(stage) and not sums_parts_inside(state, i):
                continue
            options = configs
            if i in tensor_core:
                tc_configs = ctx.params.tensor_core_unroll_configs
                options = tensor_core_unroll_options(ctx, tensor_core[i], state, tc_configs)
            elif i in tiled:
                regs = self.unrolled_registers(tiled[i], state)
                budget = self.budget(ctx, tiled[i], state)
                options = tuple(c for c in configs if regs(c) <= budget) or (0,)
            state = state.pragma(i, 0, "auto_unroll_max_step", pick(options, rng))
        return state

    @staticmethod
    def unrolled_registers(g: TileGroup, state: State):
        """max_step -> accumulators plus operand elements of the innermost loops that
        auto_unroll_max_step unrolls (inside the outer reduction tile the loops run R1, S3, R2,
        S4; a loop unrolls when its whole nest takes at most max_step steps).

        Virtual threads: lowering decides the unrolling before it injects them, so the steps
        are one virtual thread's; but injection copies the nest's statements once per virtual
        thread inside the unrolled loops, so the registers are all virtual threads': every
        accumulator, and the operand tiles of every copy (axis a's tile repeated vthread_a
        times, thread_a x S3_a x S4_a apart)."""
        sp = [split_at(state.steps, k).lengths for k in g.spatial_ids]  # (vthread, thread, S3, S4)
        rd = [split_at(state.steps, k).lengths for k in g.reduce_ids]  # (R1, R2)
        local = math.prod(lens[2] * lens[3] for lens in sp)  # one virtual thread's
        r1, r2 = math.prod(lens[0] for lens in rd), math.prod(lens[1] for lens in rd)
        chunks = [(lens[0], lens[1] * lens[2] * lens[3]) for lens in sp] + [(1, 0) for _ in rd]
        nests = (  # (steps of the nest, per-axis tile it covers), outermost first
            (
                r1 * r2 * local,
                [lens[2] * lens[3] for lens in sp] + [lens[0] * lens[1] for lens in rd],
            ),
            (r2 * local, [lens[2] * lens[3] for lens in sp] + [lens[1] for lens in rd]),
            (
                r2 * math.prod(lens[3] for lens in sp),
                [lens[3] for lens in sp] + [lens[1] for lens in rd],
            ),
            (0, [lens[3] for lens in sp] + [1 for _ in rd]),
        )
        acc = accumulators(sp)
        memo: dict[int, int] = {}

        def regs(max_step: int) -> int:
            level = next(k for k, (steps, _) in enumerate(nests) if steps <= max_step)
            if level not in memo:
                tile = nests[level][1]
                memo[level] = acc + sum(fp.bytes(tile, chunks) // fp.nbytes for fp in g.footprints)
            return memo[level]

        return regs

    @staticmethod
    def budget(ctx, g: TileGroup, state: State) -> int:
        threads = math.prod(split_at(state.steps, k).lengths[1] for k in g.spatial_ids)
        return ctx.hardware.registers_per_thread_limit(threads)


GPU_INIT_RULES: tuple[InitRule, ...] = (
    FillTileSize(),
    FillTensorCore(),
    ThreadBind(),
    SharedPadding(),
    DoubleBuffer(),
    AutoUnroll(),
    TensorCoreInstruction(),
    PipelineStages(),
    FragmentDoubleBuffer(),
    OperandCopy(),
    WarpSpecialize(),
    EpilogueVector(),
    LaunchBounds(),
    OnlineExchange(),
    FastExp(),
    SinglePass(),
)


__all__ = [
    "GPU_INIT_RULES",
    "AutoUnroll",
    "DoubleBuffer",
    "FragmentDoubleBuffer",
    "FillTileSize",
    "InitContext",
    "InitRule",
    "PipelineStages",
    "SharedPadding",
    "TensorCoreInstruction",
    "ThreadBind",
]
