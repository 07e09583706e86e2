"""End-to-end search mechanics on the CPU: the real policy and XGBoost model, with a test-only
measurer that executes lowered programs in the interpreter (issue 8's CI criterion)."""

from __future__ import annotations

import math

import pytest

import autosched
from autosched.records import load_records
from autosched.search_policy import PreloadMeasuredStates, SearchParams, SketchPolicy
from sim_measurer import SimulatedMeasurer

PARAMS = SearchParams(population=48, generations=2, sample_init_min_population=24, seed=1)


def small_task():
    return autosched.SearchTask("matmul", (32, 32, 16))


def tune(task, log, trials, policy=None):
    measurer = SimulatedMeasurer(task, [autosched.RecordToFile(str(log))])
    policy = policy or SketchPolicy(task, autosched.XGBModel(nthread=1, seed=0), PARAMS, verbose=0)
    opts = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=8, measurer=measurer, verbose=1
    )
    return autosched.auto_schedule(task, policy, opts), measurer, policy


def test_search_end_to_end_then_resume_measures_nothing_twice(tmp_path):
    log = tmp_path / "matmul.json"
    task = small_task()
    res, m1, _ = tune(task, log, 16)
    assert m1.count == 16 and len(set(m1.fingerprints)) == 16
    assert math.isfinite(res.best_cost)
    assert len(list(load_records(str(log)))) == 16
    first_best = res.best_cost

    model = autosched.XGBModel(nthread=1, seed=0)
    assert model.update_from_file(str(log)) > 0
    assert model.n_programs > 0  # trained from the log before the first new round
    policy = SketchPolicy(
        task, model, PARAMS, init_search_callbacks=[PreloadMeasuredStates(str(log))], verbose=0
    )
    assert len(policy.measured) == 16
    res2, m2, _ = tune(task, log, 16, policy)
    assert not set(m2.fingerprints) & set(m1.fingerprints)
    assert res2.best_cost <= first_best
    assert len(list(load_records(str(log)))) == 32
    best = autosched.load_best(str(log), task.workload_key)
    assert best is not None and best[1].mean_cost == pytest.approx(min(first_best, res2.best_cost))
    print(task.compute_dag.print_python_schedule(best[0].state))
