"""The `WarpSpecialize` init rule and its mutation (sketch/warp_specialize.py,
search/tensor_core_mutations.py): a producer warpgroup drawn with even odds for a wgmma stage
whose tiles TMA copies, on Hopper only; the mark round-trips through the records and the Python
schedule and lowers to the warp-specialised device program; the mutation switches it and
writes a fresh sample's records."""

from __future__ import annotations

import dataclasses
import json
import random
from types import SimpleNamespace

import pytest

from autosched.errors import ScheduleError
from autosched.lower import warp_roles_ir as wr
from autosched.lower.passes import device_program
from autosched.schedule.steps import OperandCopyStep, WarpSpecializeStep, replay
from autosched.search.mutations import MutationContext, TensorCoreChoices
from autosched.search.tensor_core_mutations import WarpSpecializeMutation
from autosched.sketch.fragment_double_buffer import group_lengths
from autosched.sketch.utils import SketchParams
from autosched.sketch.warp_specialize import WarpSpecialize, warp_specializable
from measure.hardware import HardwareParams
from tests.sketch.test_operand_copy import TMA_ONLY, drew_tma, matmul_dag, sample

PARAMS = dataclasses.replace(TMA_ONLY, warp_specializations=(False, True))
WS = WarpSpecializeStep.TAG


def specialized(state) -> bool:
    return any(st.warp_specialized for st in state.stages)


@pytest.fixture(scope="module")
def sampled():
    """(dag, sampler, states) of a 128 x 128 x 512 float16 matmul, TMA drawn wherever it fits,
    a producer warpgroup with even odds."""
    dag = matmul_dag(128, 128, 512)
    sampler, states = sample(dag, PARAMS, n=4)
    return dag, sampler, states


@pytest.fixture(scope="module")
def ws_state(sampled):
    dag, sampler, states = sampled
    return dag, sampler, next(filter(specialized, states))


@pytest.fixture(scope="module")
def plain(ws_state):
    """(the rule's context, the sketch's plan, the TMA state of `ws_state` without its mark)."""
    dag, sampler, state = ws_state
    plan = sampler.plans[sampler.sketch_of[state.key()]]
    unmarked = replay(dag, [r for r in state.key() if r[0] != WS])
    return SimpleNamespace(params=PARAMS, hardware=HardwareParams()), plan, unmarked


def test_the_rule_draws_a_producer_only_for_tma_stages_with_even_odds(sampled, plain):
    _, _, states = sampled
    assert SketchParams().warp_specializations == (False, True)  # on by default
    assert not any(specialized(s) for s in states if not drew_tma(s))
    ctx, plan, state = plain
    assert drew_tma(state) and not specialized(state)
    drawn = [WarpSpecialize().apply(ctx, plan, state, random.Random(seed)) for seed in range(200)]
    assert 70 <= sum(map(specialized, drawn)) <= 130
    assert all(d is state for d in drawn if not specialized(d))


def test_the_rule_draws_nothing_off_hopper_or_when_not_listed(plain):
    ctx, plan, state = plain
    (g,) = plan.tensor_core
    hopper = ctx.hardware
    sm80 = dataclasses.replace(hopper, arch="sm_80")
    lengths = group_lengths(state, g)
    steps = g.tiles[2] // lengths[2][0]
    assert warp_specializable(hopper, g, "wgmma", "tma", lengths, steps)
    assert not warp_specializable(hopper, g, "wgmma", "tma", lengths, steps + 1)  # no refill
    assert not warp_specializable(sm80, g, "wgmma", "tma", lengths, steps)
    assert not warp_specializable(hopper, g, "wgmma", "cp.async", lengths, steps)
    assert not warp_specializable(hopper, g, "mma", "tma", lengths, steps)
    for params, hw in ((PARAMS, sm80), (TMA_ONLY, hopper)):
        other = SimpleNamespace(params=params, hardware=hw)
        for seed in range(8):
            assert WarpSpecialize().apply(other, plan, state, random.Random(seed)) is state


def test_the_mark_round_trips_and_lowers_to_the_warp_specialised_program(ws_state):
    dag, sampler, state = ws_state
    text = dag.print_python_schedule(state)
    assert "s[T_matmul_wmma_accumulator].warp_specialize()" in text
    records = [json.loads(json.dumps(step.to_record())) for step in state.steps]
    assert records[-1][0] == WS and [r[0] for r in records].count(WS) == 1
    replayed = replay(dag, records)
    assert replayed.key() == state.key()
    program = device_program(sampler.programs[state.key()], verify=True)
    assert wr.uses_warp_roles(program.kernels[0])  # tests/lower/test_warp_specialize.py runs it


def test_the_step_refuses_a_stage_that_is_no_wgmma_accumulator(ws_state):
    dag, _, state = ws_state
    with pytest.raises(ScheduleError, match="warp_specialize"):
        state.warp_specialize("A.shared")


def test_the_mutation_switches_the_producer_and_writes_a_fresh_samples_records(ws_state):
    dag, sampler, state = ws_state
    hardware = HardwareParams()
    ctx = MutationContext(64, 8, PARAMS.auto_unroll_configs, PARAMS.tensor_core_unroll_configs)
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, PARAMS, hardware)
    mutation = WarpSpecializeMutation()
    child = mutation.apply(ctx, [state.key()], random.Random(0))
    assert child == tuple(r for r in state.key() if r[0] != WS)
    assert child[-1][0] == OperandCopyStep.TAG
    assert mutation.apply(ctx, [child], random.Random(0)) == state.key()
    off = dataclasses.replace(PARAMS, warp_specializations=(False,))
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, off, hardware)
    assert mutation.apply(ctx, [child], random.Random(0)) is None


@pytest.mark.gpu
def test_gpu_sampled_warp_specialized_states_match_numpy():
    """A sampled warp-specialised state (one consumer warpgroup) and the 128x256 configuration
    over 3 slots (two) on a 512^3 matmul, built and launched as the search's kernels are."""
    from tests.gpu.test_gpu_kernels import run_on_gpu
    from tests.sketch.test_operand_copy import with_tiles

    dag = matmul_dag(200, 64, 512)  # M past the last block tile's rows
    params = dataclasses.replace(PARAMS, warp_specializations=(True,))
    _, states = sample(dag, params, n=8)
    state = next(filter(specialized, states))
    kernel = run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
    assert "setmaxnreg.dec" in kernel.source
    dag = matmul_dag(512, 512, 512)
    state, g = with_tiles(dag, ((8, 1, 16), (1, 16, 16), (4, 16)))
    kernel = run_on_gpu(dag, state.warp_specialize(state.stages[g.acc].name), rtol=1e-2, atol=1e-2)
    assert kernel.launches[0].block == (32, 12, 1)
