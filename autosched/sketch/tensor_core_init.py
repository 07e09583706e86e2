"""Random annotation of Tensor Core sketches (tensor_core.py): an init rule (`InitRule`,
init_base.py), run after FillTileSize and before ThreadBind.

The plan's Tensor Core groups (tensor_core_plan.py) hold each Tensor Core stage's unknown
splits; `FillTensorCore` draws, per group:

  warps      the block's warps, 2, 4 or 8 (4 and 8 twice as likely: fewer warps leave the
             SM's Tensor Cores idle), split between M and N; 1 only where no other count fits
  repeats    accumulator tiles per warp along M and N, uniform over the pairs that fit: at most
             `MAX_TILES_PER_WARP` tiles, block tiles at most `MAX_BLOCK_TILES` x 16 (256) a
             side, and their fragments' registers (8 per accumulator tile, 4 per operand tile,
             per thread) at most two thirds of what a thread may have
  chunk      16-wide K steps per shared-memory tile
  padding    per shared stage whose rows are a 16-tiled dimension: none, or 16 bytes more per
             row (3 in 4), recorded as storage_align(row axis, 32 bytes, 16 bytes) in elements:
             a row stride of 16k + 8 halves puts the 8 rows of each 16-byte fragment read in 8
             distinct bank groups, keeps ldm a multiple of 16 bytes and tile offsets of 32
  vectors    the cooperative fetch's vector width per shared stage (16 bytes at most, the
             widest the likeliest)

all perfect factorisations of extent / 16 (of `padded_tiles` for an extent that is not a
multiple of 16). A draw whose shared memory (the padded A and B tiles, plus the float32 output
tile when an epilogue reads the accumulators through shared memory; with no epilogue the
copy-out stage writes global memory and needs none) is over the block's opt-in limit (above 48
KB the kernel's shared memory is dynamic) is drawn again. Then every shared stage is padded and
fetched by all the block's threads: fused, split into vectors, lanes (threadIdx.x = the warp
size, 32) and warps (threadIdx.y).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from autosched.schedule.loop_state import State
from autosched.schedule.steps import SplitStep, replay
from autosched.sketch.factorization import divisors, pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.stage_steps import fetch_vector, split_at
from autosched.sketch.tensor_core import MMA
from autosched.sketch.tensor_core_plan import (
    MATRIX_AXES,
    TensorCoreGroup,
    padded_tiles,
    tensor_core_groups,
)
from autosched.sketch.validity import Reason, Rejected, tile_sizes
from autosched.te.dtype import BYTES
from measure.hardware import HardwareParams

# the block's warps -> weight of the draw (see the module docstring); 1 is the fallback
WARP_WEIGHTS = {2: 1, 4: 2, 8: 2}
MAX_TILES_PER_WARP = 16  # accumulator tiles per warp: warp tiles up to 64 x 64
# 16-wide tiles along a block side: block tiles up to 256 x 128. A block tile's arithmetic
# intensity (flops per byte fetched from L2) grows with its size, and L2 bandwidth bounds
# tiles of 128 x 64 and below on large products
MAX_BLOCK_TILES = 16
# the share of a thread's registers its fragments may take (accumulators and one K step's
# operands); the rest holds addresses and the fetch's vectors
FRAGMENT_REGISTER_SHARE = (2, 3)
REGISTERS_PER_TILE = 8  # a 16x16 float32 accumulator over 32 lanes
REGISTERS_PER_OPERAND_TILE = 4  # a 16x16 half-precision operand fragment over 32 lanes
MAX_CHUNK = 8  # 16-wide K steps per shared tile
# registers a gather's unrolled fetch holds per vector beside the data: its global address (64
# bits) and the predicate of the window's bounds (an implicit GEMM gathering its pixels)
GATHER_TRIP_REGISTERS = 3
# a fetch's vector lanes -> weight of the draw: 16-byte copies (8 halves) half the time, as
# they move a tile in the fewest instructions (one cp.async each when double-buffered)
VECTOR_WEIGHTS = {1: 1, 2: 1, 4: 2, 8: 4}
# the fewest operand slots whose kernel reuses their bytes for its epilogue tile: a pipeline's
# main loop ends in a barrier, which lower/shared_alias.py proves separates the two
ALIASED_SLOTS = 2
# bytes added to each shared row -> weight of the draw; storage_align's factor is twice it
PAD_WEIGHTS = {0: 1, 16: 3}


def fragment_registers(rm: int, rn: int) -> int:
    """Registers per thread of a warp's fragments: rm x rn accumulators, rm matrix_a and rn
    matrix_b operand tiles."""
    return REGISTERS_PER_TILE * rm * rn + REGISTERS_PER_OPERAND_TILE * (rm + rn)


@dataclass(frozen=True)
class TensorCoreDraw:
    """One group's decisions."""

    warps: tuple[int, int]  # along M, N
    repeats: tuple[int, int]
    chunk: int
    pads: tuple[int, ...] = ()  # per shared stage: elements added to each row
    k_tile: int = MMA  # the wmma shape's K

    def extents(self) -> dict[str, int]:
        """The block's tile extent along each matrix axis."""
        return {
            "m": self.warps[0] * self.repeats[0] * MMA,
            "n": self.warps[1] * self.repeats[1] * MMA,
            "k": self.chunk * self.k_tile,
        }

    def shared_bytes(self, g: TensorCoreGroup) -> int:
        ext = self.extents()
        total = ext["m"] * ext["n"] * BYTES["float32"] if g.epilogue else 0
        pads = self.pads or (0,) * len(g.shared)
        for role, row, pad in zip(g.roles, g.row_axes, pads, strict=True):
            a, b = (ext[x] for x in MATRIX_AXES[role])
            rows = a * b // ext[row] if row is not None else a * b
            total += (a * b + rows * pad) * g.operand_bytes
        return total

    def pipelined_bytes(self, g: TensorCoreGroup, slots: int) -> int:
        """The shared memory of group `g`'s kernel with `slots` slots of these operand tiles (and
        one float32 epilogue tile): an estimate, as bound inference may clip a padded edge.
        Pipelined (two or more slots), the main loop ends in a barrier and lowering lays the
        epilogue tile over the operand tiles (`lower/shared_alias.py`): the larger counts."""
        ext = self.extents()
        epilogue = ext["m"] * ext["n"] * BYTES["float32"] if g.epilogue else 0
        operands = slots * (self.shared_bytes(g) - epilogue)
        return max(epilogue, operands) if slots >= ALIASED_SLOTS else epilogue + operands

    def lengths(self) -> tuple[tuple, tuple, tuple]:
        """The M, N and K splits' lengths."""
        return (
            (self.warps[0], self.repeats[0], MMA),
            (self.warps[1], self.repeats[1], MMA),
            (self.chunk, self.k_tile),
        )


def fragment_register_budget(hw: HardwareParams, threads: int) -> int:
    """The registers per thread a block of `threads` gives its fragments (and, unrolled, the
    fetch's vectors): `FRAGMENT_REGISTER_SHARE` of what ptxas allows each thread."""
    numerator, denominator = FRAGMENT_REGISTER_SHARE
    return hw.registers_per_thread_limit(threads) * numerator // denominator


def _pick_weighted(weights: dict, rng: random.Random):
    """A key of `weights`, drawn in proportion to its value."""
    return pick([k for k, w in weights.items() for _ in range(w)], rng)


def _all_warps_hold_tiles(warps: int, repeats: int, held: int) -> bool:
    """Whether each of `warps` warps of `repeats` tiles along an axis starts at a tile holding
    elements (`held` of them; 0: unknown). A padded axis drawn for more tiles than it holds
    could leave whole warps past its edge: lowering caps that loop at what is left, below the
    block's warp count, which idles warps and leaves their tile numbers unprovable."""
    return not held or warps <= -(-held // repeats)


def _warp_splits(warps: int, m: int, n: int, held: tuple[int, int]) -> list[tuple[int, int]]:
    """The (M, N) splits of `warps` that divide the `m` and `n` tiles and give every warp a
    tile holding elements (`held`; a padded axis of one tile drawn as two has one)."""
    return [
        (a, warps // a)
        for a in divisors(warps)
        if m % a == 0 == n % (warps // a)
        and _all_warps_hold_tiles(a, 1, held[0])
        and _all_warps_hold_tiles(warps // a, 1, held[1])
    ]


class FillTensorCore(InitRule):
    """Draws every Tensor Core group's warps, repeats, K chunk and row padding, then pads and
    fetches its shared stages cooperatively (see the module docstring)."""

    def draw(self, ctx, g: TensorCoreGroup, rng: random.Random) -> TensorCoreDraw | Reason:
        """One draw that fits, or the reason the last of `tile_retries` draws did not."""
        m, n, k = g.tiles
        hw = ctx.hardware
        counts = {w: c for w, c in WARP_WEIGHTS.items() if _warp_splits(w, m, n, g.held)} or {1: 1}
        reason = Reason.NO_OPTION
        for _ in range(ctx.params.tile_retries):
            warps = _pick_weighted(counts, rng)
            wm, wn = pick(_warp_splits(warps, m, n, g.held), rng)
            budget = fragment_register_budget(hw, warps * hw.warp_size)
            repeats = [
                (rm, rn)
                for rm in divisors(m // wm)
                for rn in divisors(n // wn)
                if rm * rn <= MAX_TILES_PER_WARP
                and max(wm * rm, wn * rn) <= MAX_BLOCK_TILES
                and fragment_registers(rm, rn) <= budget
                and _all_warps_hold_tiles(wm, rm, g.held[0])
                and _all_warps_hold_tiles(wn, rn, g.held[1])
            ]
            if not repeats:
                reason = Reason.REGISTERS
                continue
            chunk = pick([c for c in divisors(k) if c <= MAX_CHUNK], rng)
            pads = tuple(
                _pick_weighted(PAD_WEIGHTS, rng) // g.operand_bytes if row is not None else 0
                for row in g.row_axes
            )
            d = TensorCoreDraw((wm, wn), pick(repeats, rng), chunk, pads, g.k_tile)
            if d.shared_bytes(g) > hw.max_shared_memory_per_block_optin:
                reason = Reason.SHARED_MEMORY
                continue
            return d
        return reason

    def pad(self, state: State, c: int, pad: int) -> State:
        """Shared stage c's rows (its last dimension) padded by `pad` elements: its
        next-to-last axis aligned to stride % (2 * pad) == pad, which is row + pad for rows of
        a multiple of 2 * pad elements (16-wide tiles of halves)."""
        if not pad:
            return state
        return state.storage_align(c, len(state.stages[c].axes) - 2, 2 * pad, pad)

    def fetch(self, ctx, state: State, g: TensorCoreGroup, c: int, vector_ok: bool, rng) -> State:
        """All threads copy shared stage c: fused, split into vectors, a warp's lanes (threadIdx.x)
        and the block's warps (threadIdx.y, following the M and N warp counts)."""
        n = len(state.stages[c].iters)
        if n > 1:
            state = state.fuse(c, list(range(n)))
        nbytes = BYTES.get(state.stages[c].op.dtype, 2)
        widest = ctx.params.max_vector_bytes // nbytes if vector_ok else 1
        vectors = {v: w for v, w in VECTOR_WEIGHTS.items() if v <= widest}
        state = state.split(c, 0, [_pick_weighted(vectors, rng)]).vectorize(c, 1)
        state = state.split(c, 0, [ctx.hardware.warp_size]).bind(c, 1, "threadIdx.x")
        state = state.follow_fused_split(c, 0, [g.m_split, g.n_split], 0, True)
        return state.bind(c, 1, "threadIdx.y")

    def apply(self, ctx, plan, state: State, rng: random.Random) -> State:
        groups = plan.tensor_core
        if not groups:
            return state
        steps = list(state.steps)
        draws = []
        for g in groups:
            d = self.draw(ctx, g, rng)
            if isinstance(d, Reason):
                raise Rejected(tile_sizes(d))
            draws.append(d)
            for k, lens in zip(g.split_ids, d.lengths(), strict=True):
                s = steps[k]
                steps[k] = SplitStep(s.stage_id, s.iter_id, s.extent, lens, s.inner_to_outer)
        state = replay(state.dag, steps)
        for g, d in zip(groups, draws, strict=True):
            for c, ok, pad in zip(g.shared, g.vector_ok, d.pads, strict=True):
                state = self.fetch(ctx, self.pad(state, c, pad), g, c, ok, rng)
        return state


def tensor_core_unroll_options(ctx, g: TensorCoreGroup, state: State, configs) -> tuple:
    """The auto_unroll_max_step configs for a Tensor Core accumulator whose unrolled loops
    fit in the fragments' share of a thread's registers: its accumulator and operand
    fragments, plus, where the
    cooperative fetch loop unrolls (its trips at most max_step), one register per loaded
    vector word: nvcc hoists the unrolled global loads into registers (a gather's also their
    addresses and predicates, `GATHER_TRIP_REGISTERS`)."""
    (wm, rm, _), (wn, rn, _), (chunk, _) = (split_at(state.steps, k).lengths for k in g.split_ids)
    threads = wm * wn * ctx.hardware.warp_size
    budget = fragment_register_budget(ctx.hardware, threads)
    fixed = fragment_registers(rm, rn)
    kt = chunk * g.k_tile
    elems = {"wmma.matrix_a": wm * rm * MMA * kt, "wmma.matrix_b": wn * rn * MMA * kt}
    fetches = []  # (trips, registers per trip) of each shared stage's fetch loop
    gathers = g.gathers or (False,) * len(g.shared)
    for c, role, gather in zip(g.shared, g.roles, gathers, strict=True):
        vec = fetch_vector(state, c)
        words = max(1, vec * g.operand_bytes // 4) + (GATHER_TRIP_REGISTERS if gather else 0)
        fetches.append((-(-elems[role] // (threads * vec)), words))

    def regs(max_step: int) -> int:
        return fixed + max((t * w for t, w in fetches if t <= max_step), default=0)

    return tuple(c for c in configs if regs(c) <= budget) or (0,)


def reserved_stages(groups: list[TensorCoreGroup]) -> frozenset[int]:
    """The stages whose loops the Tensor Core sketch binds itself (ThreadBind skips them)."""
    return frozenset(g.root for g in groups)


__all__ = [
    # the plan's groups (tensor_core_plan.py), kept importable from here
    "MATRIX_AXES",
    "TensorCoreGroup",
    "padded_tiles",
    "tensor_core_groups",
    "fetch_vector",  # stage_steps.py
    "FillTensorCore",
    "fragment_registers",
    "TensorCoreDraw",
    "reserved_stages",
    "tensor_core_unroll_options",
]
