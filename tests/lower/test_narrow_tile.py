"""The `narrow_tiles` lowering pass (lower/narrow_tile.py) and the `NarrowTileStep` mark the
EpilogueVector rule draws: a Tensor Core stage's copy-out tile kept in the 16-bit type its
cast epilogue writes. The outputs are bit for bit those of the float32 tile (the rounding
moves from the read to the store), on the interpreter, for the mma and wgmma families, fp16
and bf16, a matmul and an implicit GEMM conv; a tile read otherwise (a bias added in float32)
or stored by wmma keeps float32; the printed stores are rounded pairs; the rule draws it with
even odds where it fits, records it among the vector epilogue's steps, and the Tensor Core
mutations look past it."""

from __future__ import annotations

import numpy as np
import pytest

from autosched import build
from autosched.lower import ir
from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.schedule.steps import NarrowTileStep, Step, replay
from autosched.search.mutations import TensorCoreChoices
from autosched.search.tensor_core_mutations import GroupChoices, with_choices
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.epilogue_vector import without_vector_epilogues
from autosched.sketch.tensor_core_plan import tensor_core_groups
from autosched.sketch.utils import SketchParams
from autosched.te.dtype import to_storage
from autosched.te.tensor import PlaceholderOp
from measure import HardwareParams, compile_resources
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz
from tests.sketch.test_epilogue_vector import batch_matmul_bf16
from tests.sketch.test_implicit_gemm import conv_nhwc

SM_90 = HardwareParams(arch="sm_90")
NARROW = SketchParams(epilogue_vectors=(True,), narrow_epilogue_tiles=(True,))


def sample(dag, params=NARROW, n=4, seed=0):
    sketches = generate_sketches(dag, SM_90, params)
    sampler = SketchSampler(sketches, SM_90, params)
    return sketches, sampler, sampler.sample(n, seed)


def tile_dtypes(program) -> set[str]:
    """The element types of the shared tiles the program's accumulators are stored to."""
    return {
        s.dst.buffer.dtype
        for k in program.kernels
        for s in ir.iter_stmts(k.body)
        if isinstance(s, ir.FragmentStore) and s.dst.buffer.scope == "shared"
    }


def outputs(dag, program, seed=0) -> dict[str, np.ndarray]:
    """The program's outputs on the interpreter, from uniform(-1, 1) inputs (storage form)."""
    rng = np.random.default_rng(seed)
    arrays = {
        t.name: to_storage(rng.uniform(-1, 1, t.shape), t.dtype)
        for t in dag.tensors
        if isinstance(t.op, PlaceholderOp)
    }
    for b in program.outputs:
        arrays[b.name] = to_storage(np.zeros(b.shape), b.dtype)
    run_program(program, arrays)
    return {b.name: arrays[b.name] for b in program.outputs}


def marked(state) -> bool:
    return any(isinstance(s, NarrowTileStep) for s in state.steps)


def without_mark(dag, state):
    return replay(dag, [s for s in state.steps if not isinstance(s, NarrowTileStep)])


@pytest.mark.parametrize(
    "make, pair",
    [
        (lambda: conv_nhwc(2, 8, 16, 32, 1, 1, 0), "half2"),
        (lambda: batch_matmul_bf16(2, 64, 32, 32), "__nv_bfloat162"),
    ],
    ids=["conv_fp16", "batch_matmul_bf16"],
)
def test_a_narrow_tile_gives_the_float32_tiles_outputs_bit_for_bit(make, pair):
    dag = make()
    params = SketchParams(
        tensor_core_instructions=("mma", "wgmma"),
        epilogue_vectors=(True,),
        narrow_epilogue_tiles=(True,),
    )
    _, sampler, states = sample(dag, params, n=4)
    narrowed = [s for s in states if marked(s)]
    families = {
        st.tensor_core_instruction
        for s in narrowed
        for st in s.stages
        if st.scope.startswith("wmma.acc")
    }
    assert families == {"mma", "wgmma"}, sampler.rejected
    for family in families:
        s = next(
            s for s in narrowed if any(st.tensor_core_instruction == family for st in s.stages)
        )
        program = sampler.programs[s.key()]
        assert tile_dtypes(program) == {dag.tensors[-1].dtype}
        tz.run_and_compare(dag, program)
        plain = lower(without_mark(dag, s), verify=True)
        assert tile_dtypes(plain) == {"float32"}
        got, want = outputs(dag, program), outputs(dag, plain)
        assert all(np.array_equal(got[k], want[k]) for k in want)
        source = build(dag, s).source
        assert f"*reinterpret_cast<{pair}*>(&" in source and "_rn(" in source


def test_a_tile_read_otherwise_or_stored_by_wmma_stays_float32():
    """A bias added in float32 reads the float32 sums; wmma stores float fragments as floats:
    the mark changes nothing there."""
    dag = conv_nhwc(2, 8, 16, 32, 1, 1, 0, epilogue="bias_relu")
    sketches, sampler, states = sample(dag, SketchParams(epilogue_vectors=(True,)), n=4)
    assert states and not any(marked(s) for s in states)  # the rule does not draw it here
    dag16 = conv_nhwc(2, 8, 16, 32, 1, 1, 0)
    params = SketchParams(epilogue_vectors=(True,), tensor_core_instructions=("wmma",))
    wmma_sketches, wmma_sampler, wmma_states = sample(dag16, params, n=2)
    cases = [(dag, sketches, sampler, states), (dag16, wmma_sketches, wmma_sampler, wmma_states)]
    for d, sk, sampled, found in cases:
        for s in found:
            (g,) = tensor_core_groups(sk[sampled.sketch_of[s.key()]])
            program = lower(s.narrow_tile(g.store), verify=True)
            assert "float16" not in tile_dtypes(program)
            tz.run_and_compare(d, program)


def test_the_rule_draws_it_with_even_odds_and_records_it_with_the_vector_steps():
    dag = conv_nhwc(2, 8, 16, 32, 1, 1, 0)
    params = SketchParams(epilogue_vectors=(True,), tensor_core_instructions=("wgmma",))
    _, sampler, states = sample(dag, params, n=8)
    assert {marked(s) for s in states} == {False, True}
    off = SketchParams(
        epilogue_vectors=(True,),
        tensor_core_instructions=("wgmma",),
        narrow_epilogue_tiles=(False,),
    )
    assert not any(marked(s) for s in sample(dag, off, n=4)[2])
    s = next(s for s in states if marked(s))
    assert ".narrow_tile()" in dag.print_python_schedule(s)
    records = s.key()
    assert replay(dag, [Step.from_record(r) for r in records]).key() == records
    choices = TensorCoreChoices.of(sampler.plans, params, SM_90)
    (g,) = choices.groups(records)
    plain = without_vector_epilogues(records, [g])
    assert NarrowTileStep.TAG not in {r[0] for r in plain}
    # the Tensor Core mutations rewrite the TC / PS / FB / OC / WS tail: the mark, among the
    # vector epilogue's steps, stays where the rule wrote it
    same = with_choices(records, (g,), {g.acc: GroupChoices.of(records, g)})
    assert same == records


@pytest.mark.slow
@needs_nvcc
def test_a_full_size_resnet50_1x1_narrow_tile_compiles_for_sm_90a_without_spills():
    """ResNet-50's 56x56 64 -> 256 1x1 at batch 32 (the conv its output's bytes bound) as
    wgmma with a 16-byte epilogue over an fp16 tile."""
    dag = conv_nhwc(32, 56, 64, 256, 1, 1, 0)
    params = SketchParams(
        tensor_core_instructions=("wgmma",),
        epilogue_vectors=(True,),
        narrow_epilogue_tiles=(True,),
    )
    _, _, states = sample(dag, params, n=3)
    states = [s for s in states if marked(s)]
    assert states
    for s in states:
        source = build(dag, s).source
        assert "__floats2half2_rn(" in source and "wgmma.mma_async" in source
        (res,) = compile_resources(source, arch="sm_90a").values()
        assert res.spill_bytes == 0


def test_a_narrow_tile_over_the_slots_of_a_warp_specialised_tma_im2col_conv():
    """The 16-bit tile laid over the operand slots (`alias_epilogue_tile`) of a 3x3 conv whose
    window-fused pipeline TMA's im2col mode feeds and a producer warpgroup issues."""
    dag = conv_nhwc(2, 8, 64, 64, 3, 1, 1)
    params = SketchParams(
        tensor_core_instructions=("wgmma",),
        operand_copies=("tma",),
        warp_specializations=(True,),
        epilogue_vectors=(True,),
        narrow_epilogue_tiles=(True,),
        double_buffer_probability=1.0,
    )
    _, sampler, states = sample(dag, params, n=1)
    (state,) = states
    program = sampler.programs[state.key()]
    (kernel,) = program.kernels
    assert tile_dtypes(program) == {"float16"} and kernel.shared_aliases
    source = build(dag, state).source
    assert "im2col" in source and "setmaxnreg" in source and "__floats2half2_rn(" in source
    tz.run_and_compare(dag, program)
