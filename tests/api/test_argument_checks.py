"""Values a user gets wrong at the Python entry points: OptionError naming the argument, what
it got and what it takes, before any work starts (never a silent default)."""

from __future__ import annotations

import numpy as np
import pytest

import autosched
from autosched.checks import boolean, integer
from autosched.errors import AutoschedError, OptionError
from autosched.sketch import generate_sketches, sample_initial_population

TASK = autosched.SearchTask("matmul", (8, 8, 8))


def test_option_errors_are_autosched_errors_and_value_errors():
    assert issubclass(OptionError, AutoschedError) and issubclass(OptionError, ValueError)
    assert integer("n", 3, 1) == 3 and boolean("flag", np.bool_(True)) is True
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(OptionError, match="n must be a positive integer"):
            integer("n", bad, 1)


@pytest.mark.parametrize(
    "options, words",
    [
        ({"num_measures_per_round": 0}, "num_measures_per_round must be a positive integer"),
        ({"num_measure_trials": -1}, "num_measure_trials must be an integer >= 0"),
        ({"num_measure_trials": 10.5}, "got float 10.5"),
        ({"early_stopping": 0}, "early_stopping must be a positive integer"),
    ],
)
def test_tuning_options_refuse_what_would_spin_or_mislead(options, words):
    with pytest.raises(OptionError, match=words):
        autosched.TuningOptions(**options)


def test_tune_tasks_wants_one_weight_per_task(tmp_path):
    log = tmp_path / "model.json"
    with pytest.raises(OptionError, match="got 1 tasks and 2 weights: give one weight per task"):
        autosched.tune_tasks([TASK], [1, 2], str(log), 8)
    with pytest.raises(OptionError, match="num_measures_per_round must be a positive integer"):
        autosched.tune_tasks([TASK], None, str(log), 8, num_measures_per_round=0)
    assert not log.exists()  # refused before anything was written


def test_search_task_checks_its_dag_and_its_tf32_flag():
    with pytest.raises(OptionError, match="dag must be a ComputeDAG, got str 'a string'"):
        autosched.SearchTask(dag="a string")
    with pytest.raises(OptionError, match="allow_tf32 must be True or False, got str 'yes please'"):
        autosched.SearchTask("matmul", (8, 8, 8), allow_tf32="yes please")
    assert autosched.SearchTask("matmul", (8, 8, 8), allow_tf32=True).allow_tf32


def test_run_cpu_never_zero_fills_a_missing_input():
    (state,) = sample_initial_population(generate_sketches(TASK.compute_dag), 1, 0)
    kernel = autosched.build(TASK.compute_dag, state)
    a = np.random.rand(8, 8).astype(np.float32)
    with pytest.raises(OptionError, match=r"run_cpu takes the 2 inputs \(A, B\).* got 1 array$"):
        kernel.run_cpu(a)
    (out,) = kernel.run_cpu(a, a)
    np.testing.assert_allclose(out, a @ a, rtol=1e-5)
    with pytest.raises(OptionError, match="got 4 arrays"):
        kernel.run_cpu(a, a, out, out)
