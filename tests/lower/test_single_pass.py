"""Single-pass cross-block reductions (lower/single_pass.py, single_pass_ir.py,
interpret_single_pass.py, verify_single_pass.py, codegen/single_pass.py): the partial sums'
kernel and the kernel summing them merged, the last block to arrive finishing; checked on the
interpreter against numpy for several arrival orders and two launches in a row, and broken
programs caught by the verifier or the interpreter."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched.codegen.build import build_program
from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import single_pass_ir as sp
from autosched.lower.device_passes import device_program
from autosched.lower.interpreter import InterpreterError, run_program
from autosched.lower.lowering import lower
from autosched.lower.verify import verify_program
from autosched.schedule.loop_state import State
from autosched.task.evaluate import evaluate
from tests.sketch.test_cross_block import sum_of_squares


def norm_state(threads: int = 16) -> State:
    """The 2-norm of a 64 x 64 matrix cut into 64 parts of a row, each part a block of 16
    threads reading 4 floats; the parts summed by `threads` threads (16: the partials'
    block, a block reduction; 1: a loop), single pass; the square root a kernel of its own."""
    state = sum_of_squares(64, 64).get_init_state()
    s = state.stage_index("s")
    state = state.split(s, "i", [64], inner_to_outer=False).rfactor(s, "i_o", 0)
    rf, s, norm = (state.stage_index(n) for n in ("s.rf", "s", "norm"))
    state = state.reorder(rf, ["i_o", "z", "i_i", "j"]).fuse(rf, ["i_i", "j"])
    state = state.split(rf, "i_i_j_fused", [16, 4]).bind(rf, "i_i_j_fused_o_i", "threadIdx.x")
    state = state.vectorize(rf, "i_i_j_fused_i").fuse(rf, ["i_o", "z"])
    state = state.bind(rf, "i_o_z_fused", "blockIdx.x")
    if threads > 1:
        state = state.split(s, "i_o_v", [threads]).bind(s, "i_o_v_i", "threadIdx.x")
    else:
        state = state.bind(s, "z", "threadIdx.x")
    return state.bind(norm, "z", "threadIdx.x").pragma(rf, 0, "single_pass", 1)


def inputs() -> dict[str, np.ndarray]:
    return {"A": np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype(np.float32)}


def run(program: ir.Program, arrays: dict[str, np.ndarray], seed: int | None = 0) -> np.ndarray:
    """The norm `program` computes on `arrays` (its output poisoned first), in place."""
    arrays["norm"] = np.full((1,), np.nan, np.float32)
    arrays.setdefault("s", np.full((1,), np.nan, np.float32))
    run_program(program, arrays, arrival_seed=seed)
    return arrays["norm"].copy()


@pytest.mark.parametrize("threads", [16, 1])
def test_one_kernel_sums_the_parts_in_its_last_block_whatever_the_order(threads):
    """The merged kernel (a block reduction over the parts, or a loop) computes the norm, the
    same bits whichever block arrives last; the counter is a zeroed workspace."""
    program = device_program(lower(norm_state(threads)))
    assert [k.grid for k in program.kernels] == [(64, 1, 1), (1, 1, 1)]  # then the sqrt
    (counter,) = program.workspaces
    assert counter.dtype == "int32" and counter in program.temps and counter in program.params
    want = np.sqrt(evaluate(sum_of_squares(64, 64), inputs())["s"])
    got = [run(program, inputs(), seed) for seed in (None, 0, 1)]
    np.testing.assert_allclose(got[0], want, rtol=1e-5)
    assert got[0].tobytes() == got[1].tobytes() == got[2].tobytes()


def test_the_counter_is_back_to_zero_after_each_launch():
    """Two launches in a row on the same workspace (a CUDA graph's replays): the last block
    resets the counter, so the second launch finishes too."""
    program = device_program(lower(norm_state()))
    arrays = inputs()
    first = run(program, arrays)
    assert arrays["s_rf_arrivals"].tolist() == [0]
    second = run(program, arrays, seed=3)
    assert arrays["s_rf_arrivals"].tolist() == [0]
    assert first.tobytes() == second.tobytes() and np.isfinite(first).all()


def merged_kernel(program: ir.Program) -> ir.Kernel:
    return program.kernels[0]


def with_body(program: ir.Program, stmts: list[ir.Stmt]) -> ir.Program:
    """`program` with its merged kernel's top-level statements replaced."""
    kernel = dataclasses.replace(merged_kernel(program), body=ir.Seq(stmts))
    return dataclasses.replace(program, kernels=[kernel, *program.kernels[1:]])


def test_the_verifier_wants_a_fence_before_the_arrival_and_a_reset_after_it():
    program = device_program(lower(norm_state()))
    body = merged_kernel(program).body
    assert isinstance(body, ir.Seq)
    *partials, fence, arrival, last = body.stmts
    assert isinstance(fence, sp.ThreadFence) and isinstance(arrival, sp.CountArrival)
    verify_program(program)
    with pytest.raises(LoweringError, match="without a ThreadFence"):
        verify_program(with_body(program, [*partials, arrival, last]))
    assert isinstance(last, ir.IfThenElse)
    no_reset = ir.IfThenElse(last.cond, ir.seq(last.then_case.stmts[:-1]))  # type: ignore[attr-defined]
    with pytest.raises(LoweringError, match="resets the counter"):
        verify_program(with_body(program, [*partials, fence, arrival, no_reset]))
    miscounted = sp.CountArrival(arrival.counter, arrival.index, arrival.flag, 32)
    with pytest.raises(LoweringError, match="expects 32 blocks"):
        verify_program(with_body(program, [*partials, fence, miscounted, last]))


def test_the_interpreter_catches_partials_read_too_early_or_unfenced():
    """Every block summing the parts (the branch on the last arrival dropped), or the parts
    read without the writers' fence: on a GPU either reads partials not yet written."""
    program = device_program(lower(norm_state()))
    body = merged_kernel(program).body
    assert isinstance(body, ir.Seq)
    *partials, fence, arrival, last = body.stmts
    assert isinstance(last, ir.IfThenElse)
    everyone = with_body(program, [*partials, fence, arrival, last.then_case])
    with pytest.raises(InterpreterError, match="had not seen every block arrive"):
        run(everyone, inputs())
    unfenced = with_body(program, [*partials, arrival, last])
    with pytest.raises(InterpreterError, match="was not fenced"):
        run(unfenced, inputs())


def test_the_cuda_source_counts_arrivals_and_the_argument_is_zeroed():
    program = device_program(lower(norm_state()))
    source = codegen_program(program)
    assert source.count("__global__") == 2
    assert "atomicAdd(&s_rf_arrivals[0], 1);" in source and "__threadfence();" in source
    assert "if ((s_rf_arrivals_seen[0] == 63))" in source
    built = build_program(program)
    zeroed = [a.name for a in built.args if a.zeroed]
    assert zeroed == ["s_rf_arrivals"]
    (first,) = built.run_cpu(inputs()["A"])  # temporaries allocated: the workspace zeroed
    (second,) = built.run_cpu(inputs()["A"])
    assert np.isfinite(first).all() and first.tobytes() == second.tobytes()


def test_a_finishing_kernel_that_synchronises_other_threads_is_refused():
    """The parts summed by 32 threads (a block reduction) while the partials' blocks have 16:
    lowering refuses the pair, and the sampler drops such a state."""
    with pytest.raises(LoweringError, match="synchronises its threads"):
        lower(norm_state(threads=32))
