"""The `OperandCopy` init rule and its mutation (sketch/operand_copy.py,
search/tensor_core_mutations.py): TMA drawn for a wgmma stage's shared tiles only where listed,
on Hopper and where it fits the tiles; the sampled TMA states compute the product on the
interpreter; the annotation round-trips through the records and the Python schedule; the
mutation switches it and keeps the records a fresh sample would have."""

from __future__ import annotations

import dataclasses
import json
import random

from autosched import te, topi
from autosched.lower import tma_ir as ti
from autosched.lower.lowering import lower
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import OperandCopyStep, Step, replay
from autosched.search.mutations import MutationContext, TensorCoreChoices
from autosched.search.tensor_core_mutations import OperandCopyMutation
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import SketchParams
from measure.hardware import HardwareParams
from tests.lower import test_tensorize as tz

TMA_ONLY = SketchParams(tensor_core_instructions=("wgmma",), operand_copies=("tma",))
OC = OperandCopyStep.TAG


def matmul_dag(m: int, n: int, k: int) -> ComputeDAG:
    a = te.placeholder((m, k), "float16", "A")
    b = te.placeholder((k, n), "float16", "B")
    return ComputeDAG([a, b, topi.matmul(a, b, out_dtype="float32")])


def batch_matmul_dag() -> ComputeDAG:
    a = te.placeholder((2, 64, 256), "bfloat16", "A")
    b = te.placeholder((2, 64, 256), "bfloat16", "B")
    return ComputeDAG([a, b, topi.batch_matmul(a, b, out_dtype="float32")])


def sample(dag, params=TMA_ONLY, n=8, seed=0, hardware=None):
    hardware = hardware or HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hardware, params), hardware, params)
    return sampler, sampler.sample(n, seed)


def drew_tma(state) -> bool:
    return any(st.operand_copy == "tma" for st in state.stages)


def first_tma(dag, params=TMA_ONLY, seeds=range(4)):
    """(sampler, state) of the first sampled state that drew TMA."""
    for seed in seeds:
        sampler, states = sample(dag, params, seed=seed)
        for s in states:
            if drew_tma(s):
                return sampler, s
    raise AssertionError("no sampled state drew TMA")


def test_sampled_tma_states_compute_the_matmul_past_its_edge():
    dag = matmul_dag(200, 64, 128)  # M past the last block tile's rows
    sampler, state = first_tma(dag)
    program = sampler.programs[state.key()]
    assert ti.uses_tma(program.kernels[0])
    tz.run_and_compare(dag, program)


def test_a_sampled_tma_batch_matmul_computes_the_dag():
    dag = batch_matmul_dag()
    sampler, state = first_tma(dag)
    program = sampler.programs[state.key()]
    assert ti.uses_tma(program.kernels[0])
    tz.run_and_compare(dag, program)


def test_the_rule_draws_tma_only_where_listed_and_on_hopper():
    dag = matmul_dag(128, 128, 256)
    assert SketchParams().operand_copies == ("cp.async",)  # off by default
    _, states = sample(dag, dataclasses.replace(TMA_ONLY, operand_copies=("cp.async",)))
    assert states and not any(drew_tma(s) for s in states)
    sm80 = dataclasses.replace(HardwareParams(), arch="sm_80")
    _, states = sample(dag, TMA_ONLY, hardware=sm80)
    assert states and not any(drew_tma(s) for s in states)
    _, states = sample(dag, TMA_ONLY)
    drawn = [s for s in states if drew_tma(s)]
    assert drawn and len(drawn) < len(states)  # only double-buffered tiles of 128-byte lines
    for s in drawn:
        assert all(
            s.stages[i].double_buffer for i, st in enumerate(s.stages) if st.operand_copy == "tma"
        )


def test_the_annotation_round_trips_through_records_and_the_python_schedule():
    dag = matmul_dag(128, 128, 256)
    _, state = first_tma(dag)
    text = dag.print_python_schedule(state)
    assert 's[A_shared].operand_copy("tma")' in text and 's[B_shared].operand_copy("tma")' in text
    records = [json.loads(json.dumps(step.to_record())) for step in state.steps]
    assert [r[2] for r in records if r[0] == OC] == ["tma", "tma"]
    replayed = replay(dag, records)
    assert replayed.key() == state.key()
    assert ti.uses_tma(lower(replayed).kernels[0])


def test_the_mutation_switches_the_copy_and_writes_a_fresh_samples_records():
    dag = matmul_dag(128, 128, 256)
    params = dataclasses.replace(TMA_ONLY, operand_copies=("cp.async", "tma"))
    hardware = HardwareParams()
    sampler, state = first_tma(dag, params)
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, params, hardware)
    mutation = OperandCopyMutation()
    child = mutation.apply(ctx, [state.key()], random.Random(0))
    assert child is not None and not any(r[0] == OC for r in child)
    assert child[-1][0] != OC and child == tuple(r for r in state.key() if r[0] != OC)
    back = mutation.apply(ctx, [child], random.Random(0))
    assert back == state.key()
    cp_async = dag.replay_steps([Step.from_record(r) for r in child])
    assert not ti.uses_tma(lower(cp_async).kernels[0])
