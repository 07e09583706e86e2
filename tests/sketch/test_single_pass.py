"""The init rule SinglePass (sketch/single_pass.py): a cross-block reduction's partial sums and
their sum drawn as one kernel, whose last block to arrive sums the parts (lower/single_pass.py).
Sampled states of a full sum, a 2-norm (its square root after the sum), a few long rows, a
column sum and RMSNorm's sum of squares compute their DAG on the interpreter, the same bits
for two orders of the blocks' arrivals; the choice is a recorded, replayed, printed pragma."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.features import N_FEATURES, extract_features
from autosched.lower.device_passes import device_program
from autosched.lower.interpreter import run_program
from autosched.lower.single_pass_ir import arrivals_of
from autosched.schedule.steps import print_python_schedule, replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.params import SketchParams
from autosched.sketch.single_pass import single_pass_candidates
from autosched.task.evaluate import evaluate
from tests.compilers import needs_nvcc
from tests.sketch.test_cross_block import column_sum, parts, rms_norm, row_sums, sum_of_squares

ALWAYS = SketchParams(cross_block_single_pass=1)


def full_sum(m: int, n: int):
    from autosched import te
    from autosched.schedule.compute_dag import ComputeDAG

    a = te.placeholder((m, n), name="A")
    i, j = te.reduce_axis((0, m), name="i"), te.reduce_axis((0, n), name="j")
    return ComputeDAG([a, te.compute((1,), lambda z: te.sum(a[i, j], axis=[i, j]), name="s")])


def single_pass(state) -> bool:
    return any(st.single_pass for st in state.stages)


def run_twice(dag, program, seeds=(0, 1)) -> list[dict[str, np.ndarray]]:
    """The program's outputs for each arrival order in `seeds`, launched in a row on the same
    arrays (the workspace kept: the counter must be back to zero), outputs poisoned each time."""
    rng = np.random.default_rng(0)
    outputs = {b.name for b in program.outputs}
    arrays = {
        b.name: rng.uniform(-1, 1, b.shape).astype(b.dtype)
        for b in program.params
        if b not in program.temps and b.name not in outputs
    }
    results = []
    for seed in seeds:
        for b in program.outputs:
            arrays[b.name] = np.full(b.shape, np.nan, b.dtype)
        run_program(program, arrays, arrival_seed=seed)
        results.append({name: arrays[name].copy() for name in outputs})
        assert all(not arrays[b.name].any() for b in program.workspaces)
    expected = evaluate(dag, {k: v for k, v in arrays.items() if k not in outputs})
    for name in outputs:
        np.testing.assert_allclose(results[0][name], expected[name], rtol=1e-4, atol=1e-5)
    return results


@pytest.mark.parametrize(
    "dag, kernels",
    [
        (full_sum(64, 64), 1),
        (sum_of_squares(64, 64), 2),  # the square root a kernel of its own, or inside it
        (row_sums((4, 4096)), 1),
        (column_sum(256, 64), 1),
        (rms_norm(4, 2048), 2),  # the sum of squares; then the normalised rows
    ],
)
def test_sampled_single_pass_states_compute_the_dag_in_any_arrival_order(dag, kernels):
    sketches = [s for s in generate_sketches(dag, params=ALWAYS) if parts(s)]
    sampler = SketchSampler(sketches, params=ALWAYS)
    states = [s for s in sampler.sample(3, 0) if single_pass(s)]
    assert states, sampler.rejected
    for state in states:
        program = device_program(sampler.programs[state.key()])
        assert len(program.kernels) <= kernels and len(program.workspaces) == 1
        first, second = run_twice(dag, program)
        assert all(first[k].tobytes() == second[k].tobytes() for k in first)  # deterministic
        features = extract_features(sampler.programs[state.key()])
        assert features.shape[1] == N_FEATURES and np.isfinite(features).all()


def test_the_draw_has_even_odds_and_is_recorded_replayed_and_printed():
    dag = sum_of_squares(64, 64)
    sketches = [s for s in generate_sketches(dag) if parts(s)]
    assert all(single_pass_candidates(s) and not single_pass(s) for s in sketches)
    sampler = SketchSampler(sketches)
    states = sampler.sample(16, 0)
    drawn = {single_pass(s) for s in states}
    assert drawn == {False, True}
    state = next(s for s in states if single_pass(s))
    assert replay(dag, state.steps) == state
    assert 'pragma(s_rf_i_o_z_fused, "single_pass", 1)' in print_python_schedule(state)
    program = sampler.programs[state.key()]
    assert arrivals_of(program.kernels[0]) and program.kernels[0].grid[0] > 1
    never = SketchSampler(sketches, params=SketchParams(cross_block_single_pass=0))
    assert not any(map(single_pass, never.sample(8, 0)))


@pytest.mark.slow
@needs_nvcc
def test_full_size_single_pass_kernels_compile_without_spills():
    """Sampled single-pass states of the benchmark's full sum (16384 x 4096) and 2-norm
    (4096 x 4096) through nvcc for sm_90: they compile, none spills."""
    from tests.lower.test_lowering import assert_no_spills

    for dag in (full_sum(16384, 4096), sum_of_squares(4096, 4096)):
        sketches = [s for s in generate_sketches(dag, params=ALWAYS) if parts(s)]
        sampler = SketchSampler(sketches, params=ALWAYS)
        states = [s for s in sampler.sample(3, 0) if single_pass(s)]
        assert states, sampler.rejected
        for state in states:
            assert_no_spills(sampler.programs[state.key()])
