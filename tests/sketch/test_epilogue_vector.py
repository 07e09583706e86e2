"""The `EpilogueVector` init rule (sketch/epilogue_vector.py): on sm_90 a Tensor Core stage's
epilogue copies its shared accumulator tile out in 16-byte vectors (8 bf16 / fp16, 4 fp32),
drawn with even odds; sampled states run on the CPU interpreter against numpy, print one vector
store and 16-byte shared reads per vector, replay from their records, are found and kept by the
Tensor Core mutations, and compile for sm_90a at the benchmark's size without spills. Other
GPUs draw as without the rule."""

from __future__ import annotations

import random

import pytest

from autosched import build, te, topi
from autosched.lower.ir import ACCUMULATOR_SCOPE
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import Step, replay
from autosched.search.mutations import MUTATIONS, MutationContext, TensorCoreChoices, structure_key
from autosched.search.tensor_core_mutations import GroupChoices
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.epilogue_vector import without_vector_epilogues
from autosched.sketch.utils import SketchParams
from autosched.task.workload_registry import make_workload_key, workload_tensors
from measure import HardwareParams, compile_resources
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz
from tests.sketch.test_implicit_gemm import conv_nhwc

VECTOR = SketchParams(epilogue_vectors=(True,), narrow_epilogue_tiles=(False,))


def batch_matmul_bf16(*args) -> ComputeDAG:
    return ComputeDAG(workload_tensors(make_workload_key("batch_matmul_bf16", args)))


def relu_matmul() -> ComputeDAG:
    """An fp32 epilogue (relu of the fp16 product): its vectors are 4 floats."""
    a = te.placeholder((64, 32), "float16", "A")
    b = te.placeholder((32, 64), "float16", "B")
    return ComputeDAG([a, b, topi.nn.relu(topi.matmul(a, b, out_dtype="float32"))])


def bias_relu_matmul() -> ComputeDAG:
    """A bias + relu + cast epilogue: the bias is read as one vector a thread too."""
    a = te.placeholder((64, 32), "float16", "A")
    b = te.placeholder((32, 128), "float16", "B")
    bias = te.placeholder((128,), "float16", "bias")
    c = topi.matmul(a, b, out_dtype="float32")
    zero = te.const(0.0, "float32")
    d = te.compute(
        c.shape,
        lambda i, j: te.cast(te.max(c[i, j] + te.cast(bias[j], "float32"), zero), "float16"),
        name="D",
    )
    return ComputeDAG([a, b, bias, d])


def sample(dag, params=VECTOR, n=4, seed=1, hardware=None):
    sampler = SketchSampler(generate_sketches(dag), hardware=hardware, params=params)
    return sampler, sampler.sample(n, seed)


def instruction(state) -> str:
    (family,) = {s.tensor_core_instruction for s in state.stages if s.scope == ACCUMULATOR_SCOPE}
    return family


def vectorized(dag, state) -> bool:
    """Whether the state's epilogue (the DAG's output stage) has a vectorized loop."""
    out = dag.tensors[-1].op.name
    return f"s[{out}].vectorize(" in dag.print_python_schedule(state)


@pytest.mark.parametrize(
    "make, vector",
    [
        (lambda: batch_matmul_bf16(2, 64, 32, 32), "uint4"),
        (relu_matmul, "float4"),
        (bias_relu_matmul, "uint4"),
    ],
    ids=["bf16_cast", "fp32_relu", "fp16_bias_relu"],
)
def test_vector_epilogues_compute_the_dag_and_print_vectors(make, vector):
    dag = make()
    sampler, states = sample(dag, n=5)
    assert states and all(vectorized(dag, s) for s in states), sampler.rejected
    out = dag.tensors[-1].op.name
    one_of_each = {instruction(s): s for s in states}  # the copy-out is the same for each
    assert set(one_of_each) == {"wmma", "mma", "wgmma"}
    for s in one_of_each.values():
        program = sampler.programs[s.key()]
        tz.run_and_compare(dag, program)
        # the product's shared tile: rows padded to 8 or 24 words mod 32, one row's float2
        # stores of 4 rows a phase on 4 distinct groups of 8 banks
        allocs = program.kernels[0].allocs
        (tile,) = [b for b in allocs if b.dtype == "float32" and b.scope == "shared"]
        assert tile.shape[-1] % 32 in (8, 24)
        source = build(dag, s).source
        assert f"*reinterpret_cast<{vector}*>(&{out}[" in source  # one 16-byte store a thread
        assert "*reinterpret_cast<const float4*>(&" in source  # the accumulators as float4s
        # the record replays to the same state
        assert replay(dag, [st.to_record() for st in s.steps]).key() == s.key()


def test_the_draw_has_even_odds_on_sm_90():
    dag = batch_matmul_bf16(2, 64, 64, 32)
    params = SketchParams(tensor_core_instructions=("wgmma",))
    _, states = sample(dag, params, n=6)
    forms = {vectorized(dag, s) for s in states}
    assert forms == {False, True}


def test_other_gpus_draw_as_without_the_rule():
    dag = batch_matmul_bf16(2, 64, 64, 32)
    sm_80 = HardwareParams(arch="sm_80")
    _, states = sample(dag, SketchParams(), n=4, hardware=sm_80)
    _, before = sample(dag, SketchParams(epilogue_vectors=(False,)), n=4, hardware=sm_80)
    assert [s.key() for s in states] == [s.key() for s in before]
    assert not any(vectorized(dag, s) for s in states)


def test_the_tensor_core_mutations_find_and_keep_a_vector_epilogue():
    """The records of a vector epilogue start with their sketch's once its two steps are taken
    out, so the mutations find the stage's group; a child keeps the vector and replays."""
    dag = batch_matmul_bf16(2, 64, 64, 32)
    params = SketchParams(tensor_core_instructions=("wmma", "mma"), epilogue_vectors=(True,))
    sampler, states = sample(dag, params, n=3)
    choices = TensorCoreChoices.of(sampler.plans, params, HardwareParams())
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    ctx.tensor_core = choices
    rng = random.Random(0)
    for s in states:
        records = s.key()
        (g,) = choices.groups(records)
        sketch = structure_key(sampler.plans[0].sketch.key())
        assert structure_key(records[: len(sketch)]) != sketch  # the vector's steps among them
        plain = without_vector_epilogues(records, [g])
        assert structure_key(plain[: len(sketch)]) == sketch
        child = MUTATIONS["tensor_core_instruction"].apply(ctx, [records], rng)
        assert child is not None
        assert GroupChoices.of(child, g).instruction != GroupChoices.of(records, g).instruction
        state = replay(dag, [Step.from_record(r) for r in child])
        assert state.key() == child and vectorized(dag, state)


def test_epilogue_vectors_are_checked():
    with pytest.raises(ValueError, match="epilogue_vectors"):
        SketchParams(epilogue_vectors=())


@needs_nvcc
def test_full_size_vector_epilogues_compile_for_sm_90a_without_spills():
    dag = batch_matmul_bf16(16, 512, 512, 64)
    params = SketchParams(tensor_core_instructions=("wgmma",), epilogue_vectors=(True,))
    _, states = sample(dag, params, n=4, seed=3)
    states = [s for s in states if vectorized(dag, s)]
    assert states
    source = build(dag, states[0]).source
    assert "wgmma.mma_async" in source and "*reinterpret_cast<uint4*>(&T_cast[" in source
    (res,) = compile_resources(source, arch="sm_90").values()
    assert res.spill_bytes == 0


def implicit_gemm(state) -> bool:
    """Whether `state` computes a conv as an implicit GEMM (its product's gathered operand)."""
    return any(s.op.name.endswith(".im2col") for s in state.stages) or any(
        s.op.name.endswith(".gemm") for s in state.stages
    )


@pytest.mark.parametrize(
    "args, epilogue",
    [
        ((2, 8, 16, 32, 1, 1, 0), "cast"),  # a 1x1: the gather is rows of the input
        ((1, 4, 16, 16, 3, 1, 1), "cast"),  # a 3x3: the gather is windows of the input
        ((16, 7, 16, 32, 1, 1, 0), "bias_relu"),  # 7x7 pixels: M = 784, blocks past its edge
    ],
    ids=["1x1_cast", "3x3_cast", "7x7_bias_relu"],
)
def test_implicit_gemm_convs_store_a_pixels_channels_as_one_vector(args, epilogue):
    """An NHWC conv's epilogue writes 8 channels of one pixel a thread: sampled implicit GEMM
    states of every family compute the conv on the interpreter and print one 16-byte store."""
    dag = conv_nhwc(*args, epilogue=epilogue)
    sampler, states = sample(dag, n=6, seed=0)
    convs = [s for s in states if implicit_gemm(s)]
    assert convs and all(vectorized(dag, s) for s in convs), sampler.rejected
    for s in {instruction(s): s for s in convs}.values():
        tz.run_and_compare(dag, sampler.programs[s.key()])
    source = build(dag, convs[0]).source
    assert "*reinterpret_cast<uint4*>(&T_cast[" in source


def test_an_nchw_conv_epilogue_computes_the_conv():
    """An NCHW output's rows are an image's pixels: a vector there is stored as one where the
    printer proves it contiguous, else element by element; the values are the conv's."""
    data = te.placeholder((2, 16, 8, 8), name="data", dtype="float16")
    kernel = te.placeholder((32, 16, 3, 3), name="kernel", dtype="float16")
    out = topi.nn.conv2d_nchw(data, kernel, 1, 1, out_dtype="float32")
    dag = ComputeDAG([data, kernel, topi.cast(out, "float16")])
    sampler, states = sample(dag, n=3, seed=0)
    convs = [s for s in states if implicit_gemm(s) and vectorized(dag, s)]
    assert convs, sampler.rejected
    for s in convs:
        tz.run_and_compare(dag, sampler.programs[s.key()])


@pytest.mark.slow
@needs_nvcc
def test_a_full_size_resnet50_1x1_vector_epilogue_compiles_for_sm_90a_without_spills():
    """ResNet-50's 56x56 64 -> 256 1x1 at batch 32 (M = 100352, N = 256, K = 64), the conv
    its output's bytes bound, as wgmma with a 16-byte epilogue."""
    dag = conv_nhwc(32, 56, 64, 256, 1, 1, 0)
    params = SketchParams(tensor_core_instructions=("wgmma",), epilogue_vectors=(True,))
    _, states = sample(dag, params, n=3, seed=0)
    states = [s for s in states if implicit_gemm(s) and vectorized(dag, s)]
    assert states
    for s in states:
        source = build(dag, s).source
        assert "wgmma.mma_async" in source and "*reinterpret_cast<uint4*>(&T_cast[" in source
        (res,) = compile_resources(source, arch="sm_90a").values()
        assert res.spill_bytes == 0
