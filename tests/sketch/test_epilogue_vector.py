"""The `EpilogueVector` init rule (sketch/epilogue_vector.py): on sm_90 a wgmma or mma stage's
epilogue copies its shared accumulator tile out in 16-byte vectors (8 bf16 / fp16, 4 fp32),
drawn with even odds; sampled states run on the CPU interpreter against numpy, print one vector
store and 16-byte shared reads per vector, replay from their records, and compile for sm_90a at
the benchmark's size without spills. Elsewhere (other GPUs, wmma, `(False,)`) the draws are
those without the rule."""

from __future__ import annotations

import pytest

from autosched import build, te, topi
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import SketchParams
from autosched.task.workload_registry import make_workload_key, workload_tensors
from measure import HardwareParams, compile_resources
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz

VECTOR = SketchParams(tensor_core_instructions=("wgmma", "mma"), epilogue_vectors=(True,))


def batch_matmul_bf16(*args) -> ComputeDAG:
    return ComputeDAG(workload_tensors(make_workload_key("batch_matmul_bf16", args)))


def relu_matmul() -> ComputeDAG:
    """An fp32 epilogue (relu of the fp16 product): its vectors are 4 floats."""
    a = te.placeholder((64, 32), "float16", "A")
    b = te.placeholder((32, 64), "float16", "B")
    return ComputeDAG([a, b, topi.nn.relu(topi.matmul(a, b, out_dtype="float32"))])


def sample(dag, params=VECTOR, n=4, seed=1, hardware=None):
    sampler = SketchSampler(generate_sketches(dag), hardware=hardware, params=params)
    return sampler, sampler.sample(n, seed)


def vectorized(dag, state) -> bool:
    """Whether the state's epilogue (the DAG's output stage) has a vectorized loop."""
    out = dag.tensors[-1].op.name
    return f"s[{out}].vectorize(" in dag.print_python_schedule(state)


@pytest.mark.parametrize(
    "make, vector",
    [
        (lambda: batch_matmul_bf16(2, 64, 32, 32), "uint4"),
        (relu_matmul, "float4"),
    ],
    ids=["bf16_cast", "fp32_relu"],
)
def test_vector_epilogues_compute_the_dag_and_print_vectors(make, vector):
    dag = make()
    sampler, states = sample(dag)
    assert states and all(vectorized(dag, s) for s in states), sampler.rejected
    out = dag.tensors[-1].op.name
    for s in states[:2]:
        program = sampler.programs[s.key()]
        tz.run_and_compare(dag, program)
        source = build(dag, s).source
        assert f"*reinterpret_cast<{vector}*>(&{out}[" in source  # one 16-byte store a thread
        assert "*reinterpret_cast<const float4*>(&" in source  # the accumulators as float4s
        # the record replays to the same state
        assert replay(dag, [st.to_record() for st in s.steps]).key() == s.key()


def test_the_draw_has_even_odds_on_sm_90():
    dag = batch_matmul_bf16(2, 64, 64, 32)
    params = SketchParams(tensor_core_instructions=("wgmma",))
    _, states = sample(dag, params, n=12)
    forms = {vectorized(dag, s) for s in states}
    assert forms == {False, True}


@pytest.mark.parametrize(
    "params, hardware",
    [
        (SketchParams(), HardwareParams(arch="sm_80")),  # not Hopper
        (SketchParams(tensor_core_instructions=("wmma",)), None),  # wmma keeps its draws
    ],
    ids=["sm_80", "wmma"],
)
def test_elsewhere_the_draws_are_those_without_the_rule(params, hardware):
    dag = batch_matmul_bf16(2, 64, 64, 32)
    _, states = sample(dag, params, n=6, hardware=hardware)
    off = SketchParams(
        tensor_core_instructions=params.tensor_core_instructions, epilogue_vectors=(False,)
    )
    _, before = sample(dag, off, n=6, hardware=hardware)
    assert [s.key() for s in states] == [s.key() for s in before]
    assert not any(vectorized(dag, s) for s in states)


def test_epilogue_vectors_are_checked():
    with pytest.raises(ValueError, match="epilogue_vectors"):
        SketchParams(epilogue_vectors=())


@needs_nvcc
def test_full_size_vector_epilogues_compile_for_sm_90a_without_spills():
    dag = batch_matmul_bf16(16, 512, 512, 64)
    _, states = sample(dag, SketchParams(tensor_core_instructions=("wgmma",)), n=4, seed=3)
    states = [s for s in states if vectorized(dag, s)]
    assert states
    for s in states[:2]:
        (res,) = compile_resources(build(dag, s).source, arch="sm_90").values()
        assert res.spill_bytes == 0
