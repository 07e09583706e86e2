"""Multi-stage shared-memory pipelines (`State.pipeline_stages`, lower/double_buffer.py): the
step, the loop lowering emits (S slots, S - 1 tiles fetched before the loop in their own
cp.async groups, one wait and one barrier per iteration), the interpreter's cp.async groups
(copies visible only at the wait that covers them: a short wait is caught), the printed
commit / wait_group, nvcc, and the init rule that draws the depth within the shared memory."""

from __future__ import annotations

import dataclasses

import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError, ScheduleError
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.lowering import lower
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.pipeline_stages import shared_bytes
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from measure import compile_resources
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.interpreter_check import assert_half_outputs_match, half_inputs, interpret_and_compare
from tests.lower.test_double_buffer import CACHES, double_buffered, reduction_loop
from tests.sketch.test_tensor_core_sketch import tc_dag
from tests.workloads_for_tests import matmul_dag, matmul_shared_state

LIMIT = HardwareParams().max_shared_memory_per_block_optin


def pipelined(dag, stages: int):
    """The fp32 shared-memory matmul (K loop of 8 tiles), its caches over `stages` slots."""
    state = double_buffered(matmul_shared_state(dag, vectors=(1, 4)))
    for name in CACHES:
        state = state.pipeline_stages(name, stages)
    return state


def _loop_waits(program: ir.Program) -> list[int]:
    return [s.pending for s in ir.iter_stmts(reduction_loop(program.kernels[0]).body)
            if isinstance(s, ir.AsyncWait)]  # fmt: skip


@pytest.mark.parametrize("stages", [3, 5])
def test_the_pipeline_fetches_stages_minus_one_tiles_ahead(stages):
    dag = matmul_dag()
    program = interpret_and_compare(dag, lower(pipelined(dag, stages), verify=True))
    kernel = program.kernels[0]
    shared = [b for b in kernel.allocs if b.scope == "shared"]
    assert all(b.shape[0] == stages and b.async_copy for b in shared)
    body = kernel.body.stmts
    assert sum(isinstance(s, ir.AsyncCommit) for s in body) == stages - 1  # the prologue
    assert _loop_waits(program) == [stages - 2]
    loop = reduction_loop(kernel)
    kinds = [type(s) for s in loop.body.stmts[:4]]
    assert kinds == [ir.AsyncWait, ir.Barrier, ir.IfThenElse, ir.AsyncCommit]
    assert f"{loop.var.name} + {stages - 1}" in str(loop.body.stmts[2].cond)
    assert [s.pending for s in body if isinstance(s, ir.AsyncWait)] == [0]  # after the loop


def test_a_short_wait_computes_with_stale_tiles():
    dag = matmul_dag()
    program = lower(pipelined(dag, 4))
    for s in ir.iter_stmts(reduction_loop(program.kernels[0]).body):
        if isinstance(s, ir.AsyncWait):
            s.pending += 1  # tile k may still be in flight
    with pytest.raises(AssertionError):
        interpret_and_compare(dag, program)


def test_step_is_printed_recorded_and_checked():
    dag = matmul_dag()
    state = pipelined(dag, 3)
    assert "s[A_shared].pipeline_stages(3)" in dag.print_python_schedule(state)
    with pytest.raises(ScheduleError, match="double_buffer the stage first"):
        matmul_shared_state(dag).pipeline_stages("A.shared", 3)
    with pytest.raises(ScheduleError, match="one of"):
        double_buffered(matmul_shared_state(dag)).pipeline_stages("A.shared", 6)
    mixed = double_buffered(matmul_shared_state(dag)).pipeline_stages("A.shared", 3)
    with pytest.raises(LoweringError, match="different pipeline stages"):
        lower(mixed)


def test_commit_and_wait_group_are_printed_and_barriers_wait_for_nothing():
    source = codegen_program(device_program(lower(pipelined(matmul_dag(), 4))))
    lines = [line.strip() for line in source.splitlines()]
    assert lines.count("as_cp_async_commit();") == 4 and "as_cp_async_wait<2>();" in lines
    assert "as_cp_async_wait<0>();" in lines and "as_cp_async_wait_all();" not in lines
    barriers = [k for k, line in enumerate(lines) if line == "__syncthreads();"]
    assert all(lines[k - 1].startswith("as_cp_async_wait<") for k in barriers)


@needs_nvcc
def test_pipelines_compile_for_sm90_without_spills():
    source = codegen_program(device_program(lower(pipelined(matmul_dag(), 5))))
    for name, res in compile_resources(source, arch="sm_90").items():
        assert res.spill_bytes == 0, (name, res)


def test_the_rule_draws_depths_that_fit_and_the_programs_compute_the_dag():
    from autosched.sketch.tensor_core_plan import tensor_core_groups

    dag = tc_dag("matmul_fp16", args=(40, 56, 72))  # padded, several K tiles
    params = SketchParams(double_buffer_probability=1.0, tensor_core_instructions=("mma",))
    (sketch,) = generate_sketches(dag)
    (group,) = tensor_core_groups(sketch)
    sampler = SketchSampler([sketch], params=params)
    states = sampler.sample(6, 1)
    assert len(states) == 6, sampler.rejected
    inputs, depths = half_inputs(dag), set()
    expected = evaluate(dag.tensors, inputs)
    for state in states:
        program = sampler.programs[state.key()]
        assert_half_outputs_match(dag, program, inputs, expected)
        depth = state.stages[group.shared[0]].pipeline_stages
        assert {state.stages[c].pipeline_stages for c in group.shared} == {depth}
        depths.add(depth)
        if any(b.async_copy for k in program.kernels for b in k.allocs):  # K runs > once
            (kernel,) = program.kernels
            # the rule's estimate bounds the kernel's (bound inference clips a padded edge)
            assert kernel.shared_bytes <= shared_bytes(state, group, depth)
            assert (
                shared_bytes(state, group, depth)
                <= HardwareParams().max_shared_memory_per_block_optin
            )
    assert len(depths) > 1
    none = SketchParams(double_buffer_probability=1.0, pipeline_stages=(2,))
    plain = SketchSampler([sketch], params=none).sample(3, 1)
    assert all(s.pipeline_stages == 2 for st in plain for s in st.stages)
    with pytest.raises(ValueError, match="pipeline_stages"):
        SketchParams(pipeline_stages=(6,))


def test_group_statements_are_reached_by_every_thread():
    from autosched.lower.verify import verify_program

    program = lower(pipelined(matmul_dag(), 3))
    kernel = program.kernels[0]
    lane = ir.THREAD_VARS["threadIdx.x"]
    at = next(k for k, s in enumerate(kernel.body.stmts) if isinstance(s, ir.AsyncCommit))
    kernel.body.stmts[at] = ir.IfThenElse(lane < 16, ir.AsyncCommit())
    with pytest.raises(LoweringError, match="AsyncCommit under the thread-dependent condition"):
        verify_program(program)


def test_the_benchmark_names_the_instructions_of_a_state():
    from benchmarks.kernel_summary import instructions

    dag = tc_dag("matmul_fp16")
    params = SketchParams(
        double_buffer_probability=1.0,
        tensor_core_instructions=("mma",),
        pipeline_stages=(3,),
        epilogue_vectors=(False,),
    )
    (state,) = SketchSampler(generate_sketches(dag), params=params).sample(1, 0)
    assert instructions(state) == "mma, 3 slots"
    params = dataclasses.replace(params, epilogue_vectors=(True,))
    (state,) = SketchSampler(generate_sketches(dag), params=params).sample(1, 0)
    assert instructions(state) == "mma, 3 slots, 16-byte epilogue"
    assert instructions(matmul_shared_state(matmul_dag())) == "-"
