"""The tiles of a stage drawn as wgmma (sketch/warpgroup_tile.py) and the mutation between
neighbouring warpgroup tiles (search/tensor_core_mutations.WarpgroupTileMutation): draws only
where wgmma is drawn, weighted toward wide, pipelined, 128-byte-row tiles; the double-buffer
records the rule adds sit where DoubleBuffer writes its own; a drawn state computes the product
on the interpreter; the mutation steps 128x128 over 4 slots <-> 128x256 over 3 and keeps the
records a fresh sample would have."""

from __future__ import annotations

import collections
import dataclasses
import random
from types import SimpleNamespace

import pytest

from autosched import te, topi
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import DoubleBufferStep, PragmaStep, Step, replay
from autosched.search.mutations import MutationContext, TensorCoreChoices, as_split
from autosched.search.tensor_core_mutations import (
    GroupChoices,
    WarpgroupTileMutation,
    with_choices,
)
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.stage_steps import split_at
from autosched.sketch.utils import SketchParams
from autosched.sketch.warpgroup_tile import shape_fits, warpgroup_shapes
from measure.hardware import HardwareParams
from tests.lower import test_tensorize as tz

WGMMA_ONLY = SketchParams(tensor_core_instructions=("wgmma",), warp_specializations=(False,))


def matmul_dag(m: int, n: int, k: int, cast: bool = False) -> ComputeDAG:
    a = te.placeholder((m, k), "float16", "A")
    b = te.placeholder((k, n), "float16", "B")
    out = topi.matmul(a, b, out_dtype="float32")
    return ComputeDAG([a, b, topi.cast(out, "float16") if cast else out])


def sample(dag, params=WGMMA_ONLY, n=64, seed=0, hardware=None, verify=False):
    hardware = hardware or HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hardware, params), hardware, params, verify)
    return sampler, sampler.sample(n, seed)


def generate_plan_groups(dag):
    """The Tensor Core groups of `dag`'s Tensor Core sketch."""
    sampler = SketchSampler(generate_sketches(dag), HardwareParams(), WGMMA_ONLY, False)
    return next(p.tensor_core for p in sampler.plans if p.tensor_core)


def tiles(sampler, state):
    """(block rows, block columns, K chunk, slots, TMA) of a sampled Tensor Core state."""
    (g,) = sampler.plans[sampler.sketch_of[state.key()]].tensor_core
    (wm, rm, _), (wn, rn, _), (chunk, k_tile) = (
        split_at(state.steps, k).lengths for k in g.split_ids
    )
    shared = state.stages[g.shared[0]]
    slots = (shared.pipeline_stages or 2) if shared.double_buffer else 1
    return wm * rm * 16, wn * rn * 16, chunk * k_tile, slots, shared.operand_copy == "tma"


@pytest.fixture(scope="module")
def drawn_4096():
    """(sampler, states) of a 4096^3 float16 matmul with wgmma only, not lowered."""
    return sample(matmul_dag(4096, 4096, 4096), n=100)


def test_wgmma_tiles_lean_to_wide_pipelined_tiles_of_whole_128_byte_rows(drawn_4096):
    sampler, states = drawn_4096
    drawn = collections.Counter(tiles(sampler, s) for s in states)
    widths = collections.Counter()
    for (_, n, *_), count in drawn.items():
        widths[n] += count
    assert widths.most_common(1)[0][0] == 256  # the widest wgmma N is the likeliest
    pipelined = sum(c for t, c in drawn.items() if t[3] >= 3)
    rows = sum(c for t, c in drawn.items() if t[2] % 64 == 0)
    assert pipelined > len(states) / 2 and rows > len(states) / 2
    large = {(128, 256), (256, 128), (128, 128)}
    fast = [t for t in drawn if t[:2] in large and t[2] == 64 and t[3] >= 3 and t[4]]
    assert fast  # 128x256 or 256x128 or 128x128, K chunk 64, 3+ slots, TMA: drawn


def test_other_gpus_and_other_families_draw_as_before():
    dag = matmul_dag(256, 256, 256)
    before = dataclasses.replace(SketchParams(), redraw_wgmma_tiles=False)
    sm80 = dataclasses.replace(HardwareParams(), arch="sm_80")
    keys = [
        [s.key() for s in sample(dag, p, 16, hardware=sm80)[1]] for p in (SketchParams(), before)
    ]
    assert keys[0] == keys[1]
    no_wgmma = SketchParams(tensor_core_instructions=("wmma", "mma"))
    old = dataclasses.replace(no_wgmma, redraw_wgmma_tiles=False)
    keys = [[s.key() for s in sample(dag, p, 16)[1]] for p in (no_wgmma, old)]
    assert keys[0] == keys[1]


def test_the_pipeline_the_rule_adds_is_recorded_where_double_buffer_writes_it():
    """A state the rule pipelined has its double-buffer records before AutoUnroll's pragma,
    replays to the same records and computes the product on the interpreter."""
    dag = matmul_dag(128, 256, 192)
    params = dataclasses.replace(WGMMA_ONLY, double_buffer_probability=0.0)
    sampler, states = sample(dag, params, n=5, verify=True)
    pipelined = [s for s in states if any(isinstance(x, DoubleBufferStep) for x in s.steps)]
    assert pipelined and len(pipelined) < len(states)
    state = pipelined[0]
    kinds = [type(x) for x in state.steps]
    first_pragma = next(k for k, x in enumerate(state.steps) if isinstance(x, PragmaStep))
    assert max(k for k, t in enumerate(kinds) if t is DoubleBufferStep) < first_pragma
    assert replay(dag, list(state.steps)).key() == state.key()
    tz.run_and_compare(dag, sampler.programs[state.key()])


def _mutation_ctx(sampler, params=WGMMA_ONLY):
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, params, HardwareParams())
    return ctx


def _with_tiles(records, g, warps: int, cols: int, slots: int):
    """`records` with group g's block tile `warps` x `cols` 16-wide tiles, a K chunk of 64 and
    `slots` slots, written as the init rules write them."""
    for k, lengths in zip(g.split_ids, ((warps, 1, 16), (1, cols, 16), (4, 16)), strict=True):
        split = as_split(records[k])
        records = (
            records[:k]
            + (dataclasses.replace(split, lengths=lengths).to_record(),)
            + records[k + 1 :]
        )
    choices = dataclasses.replace(GroupChoices.of(records, g), depth=slots)
    return with_choices(records, (g,), {g.acc: choices})


def _lengths(records, g):
    return [as_split(records[k]).lengths for k in g.split_ids]


@pytest.mark.parametrize("cast", [False, True])
def test_the_mutation_steps_between_128x128_over_4_slots_and_128x256(drawn_4096, cast):
    """128x128 over 4 slots doubles its width over the 3 slots that fit (a cast epilogue's
    128 KB float32 tile laid over the operand slots, not beside them); halving takes one slot
    back. The moves replay, fit and keep TMA."""
    wide_slots = 3
    sampler, states = drawn_4096
    if cast:
        sampler, states = sample(matmul_dag(4096, 4096, 4096, cast=True), n=40)
    state = next(
        s
        for s in states
        if tiles(sampler, s)[3:] == (3, True) or tiles(sampler, s)[3:] == (4, True)
    )
    ctx = _mutation_ctx(sampler)
    (g,) = ctx.tensor_core.groups(state.key())
    narrow = _with_tiles(state.key(), g, 8, 8, 4)
    moves = WarpgroupTileMutation.moves(ctx.tensor_core, narrow, (g,), g)
    wide = _with_tiles(state.key(), g, 8, 16, wide_slots)
    assert wide in moves and GroupChoices.of(wide, g).operand_copy == "tma"
    back = WarpgroupTileMutation.moves(ctx.tensor_core, wide, (g,), g)
    assert _with_tiles(state.key(), g, 8, 8, wide_slots + 1) in back
    assert WarpgroupTileMutation().apply(ctx, [narrow], random.Random(0)) in moves
    for records in moves:
        replayed = replay(state.dag, [Step.from_record(r) for r in records])
        assert replayed.key() == records
        (warps, _, _), (_, cols, _), _ = _lengths(records, g)
        assert shape_fits(HardwareParams(), g, warps, cols)


def test_the_mutation_leaves_other_families_alone():
    dag = matmul_dag(256, 256, 256)
    params = SketchParams(tensor_core_instructions=("mma",))
    sampler, states = sample(dag, params, n=4)
    ctx = _mutation_ctx(sampler, params)
    assert states
    for s in states:
        assert WarpgroupTileMutation().apply(ctx, [s.key()], random.Random(0)) is None


def test_tiles_that_leave_sms_idle_weigh_less_where_another_tile_fills_them():
    """1024^2 outputs: 128x256 fills 32 of 132 SMs, 64x128 fills 128; 4096^2: all fill them;
    a 128^2 product fills them with no tile, so its weights are the width's alone."""
    (g,) = generate_plan_groups(matmul_dag(128, 256, 256))
    ctx = SimpleNamespace(params=SketchParams(), hardware=HardwareParams())
    small, large = (warpgroup_shapes(ctx, g, n * n) for n in (1024, 4096))
    wide, narrow = (8, 16), (4, 8)
    assert large[wide] / large[narrow] == 2 * 16 / 8  # warpgroups 2 : 1, width 16 : 8
    assert small[wide] / small[narrow] == pytest.approx(4 * 32 / 128)
    assert warpgroup_shapes(ctx, g, 128 * 128) == warpgroup_shapes(ctx, g)
