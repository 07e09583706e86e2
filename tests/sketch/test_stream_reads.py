"""Streaming reads (`stream_reads`): a row sum's warp-per-row sketches also come with their
input read by evict-first loads (`__ldcs`); the hint is recorded and replayed as a pragma,
printed only on the global buffers a kernel never writes, a no-op for the interpreter, and
rejected by the verifier on a kernel that reads no such buffer."""

from __future__ import annotations

import dataclasses

import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.verify import verify_program
from autosched.schedule.steps import print_python_schedule, replay
from autosched.schedule.steps.annotation import PragmaStep
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.params import SketchParams
from autosched.te.expr import Const, Load
from tests.interpreter_check import interpret_and_compare
from tests.sketch.test_cross_block import ONE_SM, on_warps, row_sums, rows_per_warp, streamed


@pytest.mark.parametrize("shape, vector", [((64, 256), "float4"), ((16, 96), "float")])
def test_a_row_sum_may_read_its_rows_with_streaming_loads(shape, vector):
    """Each warp-per-row sketch has a streaming twin; its sampled states read the input with
    `__ldcs` (16 bytes a lane for 256, one float for 96), store the sums plainly, replay to
    themselves and compute the numpy sums on the interpreter."""
    dag = row_sums(shape)
    sketches = [s for s in generate_sketches(dag, ONE_SM) if on_warps(s)]
    plain = [rows_per_warp(s) for s in sketches if not streamed(s)]
    assert sorted(rows_per_warp(s) for s in sketches if streamed(s)) == sorted(plain)
    sampler = SketchSampler([s for s in sketches if streamed(s)], ONE_SM)
    states = sampler.sample(3, 0)
    assert len(states) == 3, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        source = codegen_program(program)
        if vector == "float4":
            assert "__ldcs(reinterpret_cast<const float4*>(&A[" in source, source
        else:
            assert "__ldcs(&A[" in source, source
        assert "__ldcs(&rows" not in source and "rows[" in source
        interpret_and_compare(dag, program, rtol=1e-4)
    assert '.pragma(rows_i0_o_o, "stream_reads", 1)' in print_python_schedule(states[0])
    assert replay(dag, states[0].steps) == states[0]


def test_streaming_sketches_can_be_turned_off():
    dag = row_sums((64, 256))
    params = dataclasses.replace(SketchParams(), stream_reads=False)
    assert not any(streamed(s) for s in generate_sketches(dag, ONE_SM, params))


def test_the_pragma_round_trips_and_checks_its_value():
    step = PragmaStep(1, 0, "stream_reads$1")
    assert PragmaStep.from_record(step.to_record()) == step
    state = row_sums((16, 96)).get_init_state()
    assert state.pragma(1, 0, "stream_reads", 1).stages[1].stream_reads
    with pytest.raises(Exception, match="stream_reads must be 0 or 1"):
        state.apply(PragmaStep(1, 0, "stream_reads$2"))


def test_the_verifier_accepts_the_hint_only_on_a_kernel_that_reads_a_read_only_buffer():
    x = ir.Buffer("X", (32,), "float32")
    y = ir.Buffer("Y", (32,), "float32")
    tx = ir.THREAD_VARS["threadIdx.x"]
    copy = ir.Store(y, tx, Load(x, (tx,)))
    ok = ir.Kernel("k", (1, 1, 1), (32, 1, 1), [], copy, stream_reads=True)
    verify_program(ir.Program([ok], [x, y], [y]))
    assert "__ldcs(&X[" in codegen_program(ir.Program([ok], [x, y], [y]))
    fill = ir.Store(y, tx, Const(0.0, "float32"))
    bad = ir.Kernel("k", (1, 1, 1), (32, 1, 1), [], fill, stream_reads=True)
    with pytest.raises(LoweringError, match="stream_reads, but it loads no global buffer"):
        verify_program(ir.Program([bad], [x, y], [y]))
    in_place = ir.Store(y, tx, Load(y, (tx,)))
    bad = ir.Kernel("k", (1, 1, 1), (32, 1, 1), [], in_place, stream_reads=True)
    with pytest.raises(LoweringError, match="stream_reads"):
        verify_program(ir.Program([bad], [x, y], [y]))
