"""Random annotation of Tensor Core sketches (tensor_core.py): an init rule (`InitRule`,
init_base.py), run after FillTileSize and before ThreadBind.

`tensor_core_groups(sketch)` finds, once per sketch, each Tensor Core stage's unknown splits:
the copy-out stage's M and N splits [warps, repeats, 16] and the accumulator's K split
[chunk, 16]. `make_plan` keeps them from FillTileSize and ThreadBind leaves the kernel's root
alone. `FillTensorCore` then draws, per group:

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

from autosched.lower import ir
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, REDUCE, SPATIAL
from autosched.schedule.steps import SplitStep, replay
from autosched.sketch.init_base import InitRule
from autosched.sketch.tensor_core import MMA
from autosched.sketch.utils import divisors, next_annotates, pick, split_step_ids
from autosched.sketch.validity import Reason, Rejected, tile_sizes
from autosched.te.dtype import BYTES
from autosched.te.expr import Load
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
# a fetch's vector lanes -> weight of the draw: 16-byte copies (8 halves) half the time, as
# they move a tile in the fewest instructions (one cp.async each when double-buffered)
VECTOR_WEIGHTS = {1: 1, 2: 1, 4: 2, 8: 4}
# bytes added to each shared row -> weight of the draw; storage_align's factor is twice it
PAD_WEIGHTS = {0: 1, 16: 3}
# the matrix axes of a fragment's (row, col) dimensions, by its scope
MATRIX_AXES = {"wmma.matrix_a": ("m", "k"), "wmma.matrix_b": ("k", "n")}


@dataclass(frozen=True)
class TensorCoreGroup:
    """One Tensor Core stage of a sketch: its stages, its unknown splits and what the draws
    must fit (extents in 16-wide tiles, operand element bytes)."""

    root: int  # the kernel's root stage (the epilogue, or the copy-out stage)
    store: int  # the copy-out stage (tensorized store)
    acc: int  # the accumulator stage
    m_split: int  # step ids
    n_split: int
    k_split: int
    shared: tuple[int, ...]  # the shared operand stages, fetched cooperatively
    roles: tuple[str, ...]  # per shared stage: the scope of the fragment it feeds
    row_axes: tuple[str | None, ...]  # per shared stage: the matrix axis of its last dimension
    tiles: tuple[int, int, int]  # M / 16, N / 16, K / 16 (`padded_tiles`)
    operand_bytes: int
    epilogue: bool  # the accumulators reach the output through shared memory
    k_tile: int = MMA  # the wmma shape's K (8 for TF32): the inner length of the K split
    held: tuple[int, int] = (0, 0)  # M, N tiles that hold elements: extent / 16 rounded up

    @property
    def split_ids(self) -> tuple[int, int, int]:
        return (self.m_split, self.n_split, self.k_split)

    @property
    def vector_ok(self) -> tuple[bool, ...]:
        """Per shared stage: its rows are contiguous runs of 16 (a 16-tiled last dimension),
        which vectors and row padding fit."""
        return tuple(a is not None for a in self.row_axes)


def _unknown_splits(sketch: State, i: int, kind: str) -> list[int]:
    return [k for k in split_step_ids(sketch, i, kind) if None in sketch.steps[k].lengths]


def _fragment_of(sketch: State, shared: int):
    """The fragment stage that reads shared stage `shared`."""
    op = sketch.stages[shared].op
    for s in sketch.stages:
        body = getattr(s.op, "body", None)
        if isinstance(body, Load) and getattr(body.buffer, "op", None) is op:
            return s
    return None


def _row_axis(sketch: State, shared: int) -> str | None:
    """The matrix axis ("m", "n" or "k") held by shared stage `shared`'s last dimension, from
    the fragment stage reading it (its two innermost iterators are the 16s of its row and
    column dimensions); None when the last dimension is not one of them."""
    frag = _fragment_of(sketch, shared)
    if frag is None or frag.scope not in MATRIX_AXES:
        return None
    dims = [it.name.removesuffix("_i") for it in frag.iters[-2:]]
    last = f"ax{len(sketch.stages[shared].op.axis) - 1}"
    return dict(zip(dims, MATRIX_AXES[frag.scope], strict=True)).get(last)


def padded_tiles(extent: int) -> int:
    """The 16-wide tiles an axis is drawn for: extent / 16, or for an extent that is not a
    multiple of 16 (a padded axis: whole tiles past its edge) its next even number of tiles,
    so that 2, 4 or 8 warps and repeats still divide it (1000 -> 64, not the 63 of 1008)."""
    tiles = -(-extent // MMA)
    return tiles if extent % MMA == 0 else tiles + tiles % 2


def tensor_core_groups(sketch: State) -> list[TensorCoreGroup]:
    """The Tensor Core stages of a sketch (empty for every other sketch)."""
    out = []
    for acc, stage in enumerate(sketch.stages):
        if stage.scope != ir.ACCUMULATOR_SCOPE or stage.attach is None:
            continue
        store = stage.attach[0]
        st = sketch.stages[store]
        root = st.attach[0] if st.compute_at == ATTACHED else store
        sp, rd = _unknown_splits(sketch, store, SPATIAL), _unknown_splits(sketch, acc, REDUCE)
        if len(sp) != 2 or len(rd) != 1:
            continue
        shared = tuple(
            c
            for c, s in enumerate(sketch.stages)
            if s.scope == "shared" and s.attach is not None and s.attach[0] == acc
        )
        steps = sketch.steps
        out.append(
            TensorCoreGroup(
                root=root,
                store=store,
                acc=acc,
                m_split=sp[0],
                n_split=sp[1],
                k_split=rd[0],
                shared=shared,
                roles=tuple(_fragment_of(sketch, c).scope for c in shared),
                row_axes=tuple(_row_axis(sketch, c) for c in shared),
                tiles=tuple(padded_tiles(steps[k].extent) for k in (*sp, rd[0])),
                operand_bytes=max((BYTES[sketch.stages[c].op.dtype] for c in shared), default=2),
                epilogue=root != store,
                k_tile=steps[rd[0]].lengths[-1],
                held=tuple(-(-steps[k].extent // MMA) for k in sp),
            )
        )
    return out


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


def _warp_splits(warps: int, m: int, n: int) -> list[tuple[int, int]]:
    return [(a, warps // a) for a in divisors(warps) if m % a == 0 == n % (warps // a)]


class FillTensorCore(InitRule):
    """Draws every Tensor Core group's warps, repeats, K chunk and row padding, then pads and
    fetches its shared stages cooperatively (see the module docstring)."""

    def draw(self, ctx, g: TensorCoreGroup, rng: random.Random) -> TensorCoreDraw | Reason:
        """One draw that fits, or the reason the last of `tile_retries` draws did not."""
        m, n, k = g.tiles
        hw = ctx.hardware
        counts = {w: c for w, c in WARP_WEIGHTS.items() if _warp_splits(w, m, n)} or {1: 1}
        reason = Reason.NO_OPTION
        for _ in range(ctx.params.tile_retries):
            warps = _pick_weighted(counts, rng)
            wm, wn = pick(_warp_splits(warps, m, n), rng)
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
        return state.storage_align(c, len(state.stages[c].op.axis) - 2, 2 * pad, pad)

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


def fetch_vector(state: State, c: int) -> int:
    """The vector width of shared stage c's cooperative fetch (1 before there is one)."""
    steps = state.steps
    for k, s in enumerate(steps):
        if (
            isinstance(s, SplitStep)
            and s.stage_id == c
            and next_annotates(steps, k, s, "vectorize")
        ):
            return s.lengths[0]
    return 1


def tensor_core_unroll_options(ctx, g: TensorCoreGroup, state: State, configs) -> tuple:
    """The auto_unroll_max_step configs for a Tensor Core accumulator whose unrolled loops
    fit in the fragments' share of a thread's registers: its accumulator and operand
    fragments, plus, where the
    cooperative fetch loop unrolls (its trips at most max_step), one register per loaded
    vector word: nvcc hoists the unrolled global loads into registers."""
    (wm, rm, _), (wn, rn, _), (chunk, _) = (state.steps[k].lengths for k in g.split_ids)
    threads = wm * wn * ctx.hardware.warp_size
    budget = fragment_register_budget(ctx.hardware, threads)
    fixed = fragment_registers(rm, rn)
    kt = chunk * g.k_tile
    elems = {"wmma.matrix_a": wm * rm * MMA * kt, "wmma.matrix_b": wn * rn * MMA * kt}
    fetches = []  # (trips, registers per trip) of each shared stage's fetch loop
    for c, role in zip(g.shared, g.roles, strict=True):
        vec = fetch_vector(state, c)
        words = max(1, vec * g.operand_bytes // 4)
        fetches.append((-(-elems[role] // (threads * vec)), words))

    def regs(max_step: int) -> int:
        return fixed + max((t * w for t, w in fetches if t <= max_step), default=0)

    return tuple(c for c in configs if regs(c) <= budget) or (0,)


def reserved_stages(groups: list[TensorCoreGroup]) -> frozenset[int]:
    """The stages whose loops the Tensor Core sketch binds itself (ThreadBind skips them)."""
    return frozenset(g.root for g in groups)


__all__ = [
    "FillTensorCore",
    "fetch_vector",
    "fragment_registers",
    "TensorCoreDraw",
    "TensorCoreGroup",
    "reserved_stages",
    "tensor_core_unroll_options",
    "tensor_core_groups",
]
