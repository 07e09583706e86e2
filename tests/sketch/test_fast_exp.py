"""Fast exponentials (init rule sketch/fast_exp.py, device pass lower/fast_exp.py): a kernel
keeping its softmax rows in registers is drawn with exact or fast float32 exponentials, as a
recorded pragma; the fast ones print as `__expf`, the interpreter evaluates them as the device
does, and they stay within the tolerance; kernels without a row in registers, or without an
exponential, are never drawn so."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.lower.passes import device_program
from autosched.schedule.steps import replay
from autosched.schedule.steps.annotation import PragmaStep
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.fast_exp import fast_exp_candidates
from autosched.te.npeval import CALLS
from tests.interpreter_check import interpret_and_compare
from tests.sketch.test_row_cluster import DAGS
from tests.sketch.test_row_in_registers import CLUSTERS, in_registers
from tests.sketch.test_row_in_shared import softmax


def drawn(state) -> list[bool]:
    return [st.fast_exp for st in state.stages]


def test_softmax_rows_in_registers_are_drawn_with_either_exponential():
    dag = softmax(4, 1024)
    sampler = SketchSampler(in_registers(generate_sketches(dag, params=CLUSTERS)), params=CLUSTERS)
    states = sampler.sample(8, 0)
    assert states, sampler.rejected
    assert {any(drawn(s)) for s in states} == {True, False}
    for state in states:
        assert replay(dag, state.steps) == state
        program = sampler.programs[state.key()]
        source = codegen_program(device_program(program))
        fast = any(drawn(state))
        assert ("__expf(" in source) == fast and ("expf(" in source.replace("__expf(", "")) != fast
        interpret_and_compare(dag, device_program(program), rtol=1e-5)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_kernels_without_exponentials_are_not_drawn(name):
    sketches = in_registers(generate_sketches(DAGS[name](), params=CLUSTERS))
    assert sketches and not any(fast_exp_candidates(s) for s in sketches)


def test_rows_outside_registers_keep_exact_exponentials_and_the_draw_can_be_off():
    dag = softmax(4, 1024)
    sketches = generate_sketches(dag, params=CLUSTERS)
    kept = in_registers(sketches)
    assert all(fast_exp_candidates(s) for s in kept)
    assert not any(fast_exp_candidates(s) for s in sketches if s not in kept)
    off = dataclasses.replace(CLUSTERS, fast_exp=False)
    for state in SketchSampler(in_registers(sketches), params=off).sample(4, 0):
        assert not any(drawn(state))


def test_the_pragma_round_trips_and_checks_its_value():
    step = PragmaStep(3, 0, "fast_exp$1")
    assert PragmaStep.from_record(step.to_record()) == step
    state = softmax(4, 1024).get_init_state()
    assert state.pragma(3, 0, "fast_exp", 1).stages[3].fast_exp
    with pytest.raises(Exception, match="fast_exp must be 0 or 1"):
        state.apply(PragmaStep(3, 0, "fast_exp$2"))


def test_the_interpreter_evaluates_a_fast_exponential_as_the_device_does():
    """x times log2(e) rounded to float32, then 2 to that power: a few ulps from exp where a
    softmax uses it, more where the product's rounding is scaled by a large |x|."""
    x = np.linspace(-87.0, 0.0, 10001, dtype=np.float32)
    fast, exact = CALLS["fast_exp"](x), CALLS["exp"](x)
    assert fast.dtype == np.float32
    expected = np.exp2((x * np.float32(1.4426950408889634)).astype(np.float32))
    np.testing.assert_array_equal(fast, expected.astype(np.float32))
    error = np.abs(fast / exact - 1)
    assert error[x > -10].max() < 1e-6 and 1e-6 < error.max() < 1e-5
