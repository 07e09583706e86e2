"""Register double buffering of mma operand fragments (`State.fragment_double_buffer`,
lower/fragment_double_buffer.py): the step and its checks, the loop the pass makes (step 0's
loads before the loop, step s + 1's loads guarded ahead of step s's multiplies, two register
slots, an unrolled loop), the interpreter against numpy for fp16 / bf16 matmul, batch_matmul,
a direct and an implicit GEMM conv, a wrong slot caught, and nvcc without spills."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import ScheduleError
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.lowering import lower
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.interpreter_check import assert_half_outputs_match, half_inputs
from tests.lower import test_tensorize as tz

ACC = ir.ACCUMULATOR_SCOPE


def _acc(state) -> str:
    return next(s.name for s in state.stages if s.scope == ACC)


def double_buffered(make=tz.matmul_state):
    """A hand-built Tensor Core state (K chunk of 2 steps), mma, fragments double-buffered."""
    dag, state = make()
    acc = _acc(state)
    return dag, state.tensor_core_instruction(acc, "mma").fragment_double_buffer(acc)


def operands(program: ir.Program) -> list[ir.Buffer]:
    return [
        b
        for k in program.kernels
        for b in k.allocs
        if b.scope in ("wmma.matrix_a", "wmma.matrix_b")
    ]


def k_step_loop(program: ir.Program) -> ir.For:
    (kernel,) = program.kernels
    loops = [
        s
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ir.For)
        and any(isinstance(x, ir.FragmentMma) for x in ir.iter_stmts(s.body))
        and any(isinstance(x, ir.FragmentLoad) for x in ir.iter_stmts(s.body))
    ]
    return loops[-1]  # the innermost


def test_the_step_is_printed_and_checked():
    dag, state = double_buffered()
    assert "s[T_matmul_wmma_accumulator].fragment_double_buffer()" in dag.print_python_schedule(
        state
    )
    _, plain = tz.matmul_state()
    with pytest.raises(ScheduleError, match="tensor_core_instruction"):
        plain.fragment_double_buffer(_acc(plain))  # wmma
    with pytest.raises(ScheduleError, match="only an accumulator stage"):
        plain.tensor_core_instruction(_acc(plain), "mma").fragment_double_buffer("T_matmul")


def test_the_loop_loads_the_next_step_ahead_into_the_other_slot():
    dag, state = double_buffered()
    _, plain_state = tz.matmul_state()
    acc = _acc(plain_state)
    plain = lower(plain_state.tensor_core_instruction(acc, "mma"))
    program = lower(state, verify=True)
    sizes = {b.name: b.size for b in operands(plain)}
    assert {b.name: b.size for b in operands(program)} == {n: 2 * s for n, s in sizes.items()}
    loop = k_step_loop(program)
    assert loop.extent == 2 and loop.kind == "unroll"
    ahead, *compute = loop.body.stmts
    assert isinstance(ahead, ir.IfThenElse) and f"{loop.var.name} + 1" in str(ahead.cond)
    assert all(
        isinstance(s, ir.FragmentLoad) for s in ir.iter_stmts(ahead) if isinstance(s, ir.WarpStmt)
    )
    assert not any(isinstance(s, ir.FragmentLoad) for c in compute for s in ir.iter_stmts(c))
    (kernel,) = program.kernels
    before = kernel_stmts_before(kernel.body, loop)
    assert any(isinstance(s, ir.FragmentLoad) for s in before)  # step 0, the prologue
    tz.run_and_compare(dag, program)


def kernel_stmts_before(body: ir.Stmt, loop: ir.For) -> list[ir.Stmt]:
    """The statements of the Seq holding `loop` that run before it, flattened."""
    for s in ir.iter_stmts(body):
        if isinstance(s, ir.Seq) and any(c is loop for c in s.stmts):
            at = next(i for i, c in enumerate(s.stmts) if c is loop)
            return [x for c in s.stmts[:at] for x in ir.iter_stmts(c)]
    raise AssertionError("loop not found")


@pytest.mark.parametrize(
    "make",
    [
        tz.matmul_state,
        lambda: tz.matmul_state("bfloat16", epilogue=True),
        tz.batch_matmul_state,
        tz.conv_state,
    ],
    ids=["matmul_fp16", "matmul_bf16_epilogue", "batch_matmul_bf16", "conv_fp16"],
)
def test_double_buffered_programs_match_numpy(make):
    dag, state = double_buffered(make)
    program = lower(state, verify=True)
    assert k_step_loop(program).kind == "unroll"
    tz.run_and_compare(dag, device_program(program, verify=True))


def test_sampled_implicit_gemm_convs_match_numpy():
    """Sampled mma states of an implicit GEMM conv (64 input channels: K chunks of 1 to 4
    steps), their fragments double-buffered where the k-step loop runs more than once."""
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag("conv2d_nhwc_fp16", args=(2, 6, 6, 16, 64, 3, 3, 1, 1))
    params = SketchParams(tensor_core_instructions=("mma",))
    sampler = SketchSampler(generate_sketches(dag, None, params), None, params)
    inputs = half_inputs(dag)
    expected = evaluate(dag, inputs)
    doubled = 0
    for state in sampler.sample(4, 0):
        acc = next(i for i, s in enumerate(state.stages) if s.scope == ACC)
        program = lower(state.fragment_double_buffer(acc), verify=True)
        plain = sum(b.size for b in operands(sampler.programs[state.key()]))
        doubled += sum(b.size for b in operands(program)) == 2 * plain
        assert_half_outputs_match(dag, device_program(program), inputs, expected)
    assert doubled


def test_a_multiply_on_the_wrong_slot_computes_a_wrong_product():
    dag, state = double_buffered()
    program = lower(state)
    loop = k_step_loop(program)
    ahead, *compute = loop.body.stmts

    def other_slot(s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.FragmentMma):
            tiles = s.a.size // ir.tile_elems(s.a) // 2
            shifted = ir.BinOp("+", s.a_tile, ir.int32(tiles), ir.I32)
            slot = ir.BinOp("floormod", shifted, ir.int32(2 * tiles), ir.I32)
            return dataclasses.replace(s, a_tile=slot)
        if isinstance(s, ir.For):
            return ir.For(s.var, s.extent, s.kind, other_slot(s.body))
        if isinstance(s, ir.Seq):
            return ir.Seq([other_slot(c) for c in s.stmts])
        return s

    loop.body = ir.Seq([ahead, *(other_slot(c) for c in compute)])
    with pytest.raises(AssertionError):
        tz.run_and_compare(dag, program)


@needs_nvcc
def test_nvcc_compiles_without_spills():
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag("matmul_fp16", reduced=False)
    params = SketchParams(tensor_core_instructions=("mma",))
    sampler = SketchSampler(generate_sketches(dag, None, params), None, params, False)
    for state in sampler.sample(2, 0):
        acc = next(i for i, s in enumerate(state.stages) if s.scope == ACC)
        source = codegen_program(device_program(lower(state.fragment_double_buffer(acc))))
        for name, res in compile_resources(source, arch="sm_90").items():
            assert res.spill_bytes == 0 and res.stack_bytes == 0, (name, res)


# ---- across shared tiles ---------------------------------------------------------------------


def pipelined(stages: int):
    """The hand-built mma matmul (2 shared tiles of 2 k-steps), its shared caches fetched
    `stages` - 1 tiles ahead, its fragments double-buffered."""
    dag, state = tz.matmul_state()
    acc = _acc(state)
    state = state.tensor_core_instruction(acc, "mma")
    for cache in ("A.shared", "B.shared"):
        state = state.double_buffer(cache)
        if stages > 2:
            state = state.pipeline_stages(cache, stages)
    return dag, state.fragment_double_buffer(acc)


def tile_loop(program: ir.Program) -> ir.For:
    (kernel,) = program.kernels
    return next(
        s
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ir.For) and any(isinstance(x, ir.Barrier) for x in ir.iter_stmts(s.body))
    )


@pytest.mark.parametrize("stages", [2, 3])
def test_the_next_tiles_first_step_is_loaded_before_the_last_step_multiplies(stages):
    """A double-buffered tile loop: its wait and barrier move before the last k-step, where
    the next tile's first fragments are loaded (guarded) while the last step multiplies; the
    loop starts with the fetch ahead and a k-step whose fragments are already loaded."""
    dag, state = pipelined(stages)
    program = lower(state, verify=True)
    loop = tile_loop(program)
    kinds = [type(s) for s in loop.body.stmts]
    barrier = kinds.index(ir.Barrier)
    assert kinds.count(ir.Barrier) == 1 and kinds[-1] is not ir.Barrier
    if stages > 2:
        assert kinds[barrier - 1] is ir.AsyncWait and ir.AsyncCommit in kinds[:barrier]
    after = loop.body.stmts[barrier + 1 :]
    assert isinstance(after[0], ir.IfThenElse) and f"{loop.var.name} + 1" in str(after[0].cond)
    loaded = [s for s in ir.iter_stmts(after[0]) if isinstance(s, ir.WarpStmt)]
    assert loaded and all(isinstance(s, ir.FragmentLoad) for s in loaded)
    assert any(isinstance(s, ir.FragmentMma) for c in after[1:] for s in ir.iter_stmts(c))
    tz.run_and_compare(dag, device_program(program, verify=True))


def test_a_missing_wait_before_the_next_tile_is_caught():
    """Without the wait moved into the loop, the next tile's fragments read a shared tile whose
    copies are still in flight: the interpreter computes a wrong product."""
    dag, state = pipelined(3)
    program = lower(state)
    loop = tile_loop(program)
    loop.body = ir.Seq([s for s in loop.body.stmts if not isinstance(s, ir.AsyncWait)])
    with pytest.raises(AssertionError):
        tz.run_and_compare(dag, program)


# ---- the init rule ---------------------------------------------------------------------------


def test_the_init_rule_draws_it_where_the_fragments_cross_tiles():
    from autosched.sketch.fragment_double_buffer import eligible, group_lengths
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag("matmul_fp16", reduced=False)
    sketches = generate_sketches(dag)
    # the seed's draws as they were before the narrow epilogue tile drew its own
    params = SketchParams(narrow_epilogue_tiles=(False,))
    sampler = SketchSampler(sketches, None, params, False)
    drawn = 0
    for state in sampler.sample(40, 0):
        (g,) = sampler.plans[sampler.sketch_of[state.key()]].tensor_core
        buffered = {i for i, s in enumerate(state.stages) if s.double_buffer}
        acc = state.stages[g.acc]
        if acc.fragment_double_buffer:
            drawn += 1
            lengths = group_lengths(state, g)
            assert eligible(sampler.hardware, g, lengths, acc.tensor_core_instruction, buffered)
    assert drawn
    never = SketchParams(fragment_double_buffers=(False,))
    off = SketchSampler(sketches, None, never, False).sample(40, 0)
    assert not any(s.fragment_double_buffer for state in off for s in state.stages)
    with pytest.raises(ValueError, match="fragment_double_buffers"):
        SketchParams(fragment_double_buffers=())


def doubled_mma_sampler(dag) -> SketchSampler:
    """A sampler of mma states whose shared tiles and fragments are all double-buffered."""
    params = SketchParams(
        tensor_core_instructions=("mma",),
        double_buffer_probability=1.0,
        fragment_double_buffers=(True,),
    )
    return SketchSampler(generate_sketches(dag, None, params), None, params)


def test_sampled_double_buffered_states_match_numpy():
    """mma states drawn with double-buffered shared tiles (4 tiles of 2 k-steps) and doubled
    fragments, on the interpreter."""
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag("matmul_fp16", args=(32, 32, 128))
    sampler = doubled_mma_sampler(dag)
    inputs = half_inputs(dag)
    expected = evaluate(dag, inputs)
    crossed = 0
    for state in sampler.sample(6, 0):
        program = sampler.programs[state.key()]
        if any(s.fragment_double_buffer for s in state.stages):
            loop = tile_loop(program)
            crossed += any(isinstance(s, ir.FragmentLoad) for s in ir.iter_stmts(loop.body))
        assert_half_outputs_match(dag, device_program(program), inputs, expected)
    assert crossed


# ---- GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_matches_numpy():
    """Sampled states with doubled fragments across 2- to 5-slot pipelines, run on the GPU."""
    from autosched.codegen.build import build_program
    from autosched.te.dtype import from_storage
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag("matmul_fp16", args=(256, 256, 512))
    sampler = doubled_mma_sampler(dag)
    inputs = half_inputs(dag)
    expected = evaluate(dag, inputs)
    (out,) = dag.outputs
    want = from_storage(expected[out.name], out.output(0).dtype).astype(np.float32)
    ran = 0
    for state in sampler.sample(8, 0):
        if not any(s.fragment_double_buffer for s in state.stages):
            continue
        program = device_program(sampler.programs[state.key()])
        arrays = dict(inputs)
        arrays[out.name] = np.zeros_like(expected[out.name])
        build_program(program)(*(arrays[b.name] for b in program.params))
        got = from_storage(arrays[out.name], out.output(0).dtype).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
        ran += 1
    assert ran
