"""Random annotation of Tensor Core sketches (tensor_core.py): an init rule with InitRule's
interface (`apply(ctx, plan, state, rng)`), run after FillTileSize and before ThreadBind.

`tensor_core_groups(sketch)` finds, once per sketch, each Tensor Core stage's unknown splits:
the copy-out stage's M and N splits [warps, repeats, 16] and the accumulator's K split
[chunk, 16]. `make_plan` keeps them from FillTileSize and ThreadBind leaves the kernel's root
alone. `FillTensorCore` then draws, per group:

  warps      the block's warps (1, 2, 4 or 8), split between M and N
  repeats    accumulator tiles per warp along M and N: at most `MAX_TILES_PER_WARP`, and their
             registers (8 per tile per thread) at most half of what a thread may have
  chunk      16-wide K steps per shared-memory tile
  vectors    the cooperative fetch's vector width per shared stage (16 bytes at most)

all perfect factorisations of extent / 16. A draw whose shared memory (A tile + B tile, plus
the float32 output tile when an epilogue reads the accumulators through shared memory) is over
the block's limit is drawn again. Then every shared stage is fetched by all the block's threads:
fused, split into vectors, lanes (threadIdx.x = 32) and warps (threadIdx.y).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, REDUCE, SPATIAL, SplitRel
from autosched.schedule.steps import SplitStep, replay
from autosched.sketch.tensor_core import ACC_SCOPE, MMA
from autosched.sketch.utils import divisors, split_step_ids
from autosched.sketch.validity import Reason, Rejected, tile_sizes
from autosched.te.dtype import BYTES
from autosched.te.expr import Load

WARP_COUNTS = (1, 2, 4, 8)
MAX_TILES_PER_WARP = 8  # accumulator tiles per warp
REGISTERS_PER_TILE = 8  # a 16x16 float32 accumulator over 32 lanes
REGISTERS_PER_OPERAND_TILE = 4  # a 16x16 half-precision operand fragment over 32 lanes
MAX_CHUNK = 8  # 16-wide K steps per shared tile
LANES = 32


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
    vector_ok: tuple[bool, ...]  # per shared stage: its innermost dimension is a 16-tiled one
    tiles: tuple[int, int, int]  # M / 16, N / 16, K / 16
    operand_bytes: int
    epilogue: bool  # the accumulators reach the output through shared memory

    @property
    def split_ids(self) -> tuple[int, int, int]:
        return (self.m_split, self.n_split, self.k_split)


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


def _innermost_tiled(sketch: State, shared: int) -> bool:
    """Whether the fragment stage reading `shared` splits the tensor's last dimension by 16
    (then the shared tile's rows are contiguous runs of 16 and vectors fit them)."""
    frag = _fragment_of(sketch, shared)
    last = f"ax{len(sketch.stages[shared].op.axis) - 1}"
    return frag is not None and any(
        isinstance(r, SplitRel) and r.parent == last for r in frag.relations
    )


def tensor_core_groups(sketch: State) -> list[TensorCoreGroup]:
    """The Tensor Core stages of a sketch (empty for every other sketch)."""
    out = []
    for acc, stage in enumerate(sketch.stages):
        if stage.scope != ACC_SCOPE or stage.attach is None:
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
                vector_ok=tuple(_innermost_tiled(sketch, c) for c in shared),
                tiles=tuple(steps[k].extent // MMA for k in (*sp, rd[0])),
                operand_bytes=max((BYTES[sketch.stages[c].op.dtype] for c in shared), default=2),
                epilogue=root != store,
            )
        )
    return out


@dataclass(frozen=True)
class TensorCoreDraw:
    """One group's decisions."""

    warps: tuple[int, int]  # along M, N
    repeats: tuple[int, int]
    chunk: int

    def shared_bytes(self, g: TensorCoreGroup) -> int:
        mt = self.warps[0] * self.repeats[0] * MMA
        nt = self.warps[1] * self.repeats[1] * MMA
        kt = self.chunk * MMA
        out = mt * nt * BYTES["float32"] if g.epilogue else 0
        return (mt + nt) * kt * g.operand_bytes + out

    def lengths(self) -> tuple[tuple, tuple, tuple]:
        """The M, N and K splits' lengths."""
        return (
            (self.warps[0], self.repeats[0], MMA),
            (self.warps[1], self.repeats[1], MMA),
            (self.chunk, MMA),
        )


def _pick(options, rng: random.Random):
    return options[int(rng.random() * len(options))]


class FillTensorCore:
    """Draws every Tensor Core group's warps, repeats and K chunk, then fetches its shared
    stages cooperatively (see the module docstring). Has InitRule's interface."""

    def draw(self, ctx, g: TensorCoreGroup, rng: random.Random) -> TensorCoreDraw | Reason:
        """One draw that fits, or the reason the last of `tile_retries` draws did not."""
        m, n, k = g.tiles
        hw = ctx.hardware
        reason = Reason.NO_OPTION
        for _ in range(ctx.params.tile_retries):
            warps = _pick(WARP_COUNTS, rng)
            splits = [(a, warps // a) for a in divisors(warps) if m % a == 0 == n % (warps // a)]
            if not splits:
                reason = Reason.NO_OPTION
                continue
            wm, wn = _pick(splits, rng)
            regs = hw.registers_per_thread_limit(warps * hw.warp_size) // 2
            most = min(MAX_TILES_PER_WARP, regs // REGISTERS_PER_TILE)
            rm = _pick(divisors(m // wm), rng)
            rn_opts = [r for r in divisors(n // wn) if rm * r <= most]
            if not rn_opts:
                reason = Reason.REGISTERS
                continue
            chunk = _pick([c for c in divisors(k) if c <= MAX_CHUNK], rng)
            d = TensorCoreDraw((wm, wn), (rm, _pick(rn_opts, rng)), chunk)
            if d.shared_bytes(g) > hw.max_shared_memory_per_block:
                reason = Reason.SHARED_MEMORY
                continue
            return d
        return reason

    def fetch(self, ctx, state: State, g: TensorCoreGroup, c: int, vector_ok: bool, rng) -> State:
        """All threads copy shared stage c: fused, split into vectors, 32 lanes (threadIdx.x)
        and the block's warps (threadIdx.y, following the M and N warp counts)."""
        n = len(state.stages[c].iters)
        if n > 1:
            state = state.fuse(c, list(range(n)))
        nbytes = BYTES.get(state.stages[c].op.dtype, 2)
        widest = ctx.params.max_vector_bytes // nbytes if vector_ok else 1
        vectors = [v for v in (1, 2, 4, 8) if v <= widest]
        state = state.split(c, 0, [_pick(vectors, rng)]).vectorize(c, 1)
        state = state.split(c, 0, [LANES]).bind(c, 1, "threadIdx.x")
        state = state.follow_fused_split(c, 0, [g.m_split, g.n_split], 0, True)
        return state.bind(c, 1, "threadIdx.y")

    def apply(self, ctx, plan, state: State, rng: random.Random) -> State:
        groups = plan.tensor_core
        if not groups:
            return state
        steps = list(state.steps)
        for g in groups:
            d = self.draw(ctx, g, rng)
            if isinstance(d, Reason):
                raise Rejected(tile_sizes(d))
            for k, lens in zip(g.split_ids, d.lengths(), strict=True):
                s = steps[k]
                steps[k] = SplitStep(s.stage_id, s.iter_id, s.extent, lens, s.inner_to_outer)
        state = replay(state.dag, steps)
        for g in groups:
            for c, ok in zip(g.shared, g.vector_ok, strict=True):
                state = self.fetch(ctx, state, g, c, ok, rng)
        return state

    def __repr__(self) -> str:
        return type(self).__name__


def _fetch_vector(state: State, c: int) -> int:
    """The vector width of shared stage c's cooperative fetch (1 before there is one)."""
    steps = state.steps
    for k, s in enumerate(steps[:-1]):
        nxt = steps[k + 1]
        if (
            isinstance(s, SplitStep)
            and s.stage_id == c
            and getattr(nxt, "annotation", None) == "vectorize"
            and nxt.stage_id == c
        ):
            return s.lengths[0]
    return 1


def tensor_core_unroll_options(ctx, g: TensorCoreGroup, state: State, configs) -> tuple:
    """The auto_unroll_max_step configs for a Tensor Core accumulator whose unrolled loops
    fit in half a thread's registers: its accumulator and operand fragments, plus, where the
    cooperative fetch loop unrolls (its trips at most max_step), one register per loaded
    vector word: nvcc hoists the unrolled global loads (seen with ptxas: 64 threads fetching
    a 32x256 tile one element at a time, unrolled, spill)."""
    (wm, rm, _), (wn, rn, _), (chunk, _) = (state.steps[k].lengths for k in g.split_ids)
    threads = wm * wn * LANES
    budget = ctx.hardware.registers_per_thread_limit(threads) // 2
    fixed = REGISTERS_PER_TILE * rm * rn + REGISTERS_PER_OPERAND_TILE * (rm + rn)
    kt = chunk * MMA
    elems = {"wmma.matrix_a": wm * rm * MMA * kt, "wmma.matrix_b": wn * rn * MMA * kt}
    fetches = []  # (trips, registers per trip) of each shared stage's fetch loop
    for c, role in zip(g.shared, g.roles, strict=True):
        vec = _fetch_vector(state, c)
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
    "TensorCoreDraw",
    "TensorCoreGroup",
    "reserved_stages",
    "tensor_core_unroll_options",
    "tensor_core_groups",
]
