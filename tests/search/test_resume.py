"""Resuming a search from its log: tune, then resume for more trials as the seeds do —
`XGBModel().update_from_file(log)` + `PreloadMeasuredStates(log)` + the same log — and resume
after the tuner was killed with SIGKILL mid-run. Runs on the CPU with the interpreter-based
test measurer."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest

import autosched
from autosched.records import load_records
from autosched.search.policy import PreloadMeasuredStates, SearchParams, SketchPolicy
from tests.sim_measurer import SimulatedMeasurer

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
PARAMS = SearchParams(population=48, generations=1, sample_init_min_population=24, n_jobs=1, seed=1)


class SpyModel(autosched.XGBModel):
    """An XGBModel that notes how many measured programs it knew at each `predict`. Its trees
    score from the first training on (no few-shot random fallback), so the resumed search is
    guided by what the model learnt from the log."""

    def __init__(self, **kw) -> None:
        super().__init__(nthread=1, seed=0, few_shot_threshold=0, **kw)
        self.known_at_predict: list[int] = []

    def predict(self, features):
        self.known_at_predict.append(self.n_programs)
        return super().predict(features)


def task():
    return autosched.SearchTask("matmul", (16, 16, 8))


def tune(t, log, trials: int, per_round: int, policy):
    measurer = SimulatedMeasurer(t, [autosched.RecordToFile(str(log))])
    opts = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=per_round, measurer=measurer, verbose=0
    )
    return autosched.auto_schedule(t, policy, opts), measurer


def resumed_policy(t, log):
    """The seeds' resume: the model trained from the log, then the policy preloaded from it."""
    model = SpyModel()
    n = model.update_from_file(str(log))
    return SketchPolicy(
        t, model, PARAMS, init_search_callbacks=[PreloadMeasuredStates(str(log))], verbose=0
    ), n


def fingerprints(log) -> list[str]:
    dag = task().compute_dag
    return [dag.replay_steps(inp.steps).fingerprint() for inp, _ in load_records(str(log))]


def test_tune_then_resume_measures_nothing_twice_after_training_on_the_log(tmp_path):
    log = tmp_path / "matmul.json"
    t = task()
    res1, m1 = tune(t, log, 32, 16, SketchPolicy(t, SpyModel(), PARAMS, verbose=0))
    assert m1.count == 32 and math.isfinite(res1.best_cost)

    policy, n = resumed_policy(t, log)
    assert n == 32 and len(policy.measured) == 32
    res2, m2 = tune(t, log, 32, 16, policy)
    # the model had every logged program before it scored anything in the first new round
    assert policy.cost_model.known_at_predict[0] == 32
    assert m2.count == 32 and not set(m2.fingerprints) & set(m1.fingerprints)
    assert res2.best_cost <= res1.best_cost
    fps = fingerprints(log)
    assert len(fps) == 64 and len(set(fps)) == 64
    best = autosched.load_best(str(log), t.workload_key)
    assert best[1].mean_cost == pytest.approx(res2.best_cost)


# run from the repository root (for tests.sim_measurer)
SCRIPT = """
import autosched
from autosched.search.policy import SearchParams, SketchPolicy
from tests.sim_measurer import SimulatedMeasurer

task = autosched.SearchTask("matmul", (16, 16, 8))
params = SearchParams(population=48, generations=1, sample_init_min_population=24, n_jobs=1, seed=3)
policy = SketchPolicy(task, autosched.XGBModel(nthread=1, seed=0), params, verbose=0)
measurer = SimulatedMeasurer(task, [autosched.RecordToFile({log!r})])
opts = autosched.TuningOptions(num_measure_trials=100000, num_measures_per_round=4,
                               measurer=measurer, verbose=0)
autosched.auto_schedule(task, policy, opts)
"""


def run_until_killed(log, min_records: int, timeout: float = 300.0) -> None:
    """Start a long tuning run in a subprocess; SIGKILL it once the log holds min_records lines."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT.format(log=str(log))],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": TESTS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the tuner exited early: {proc.stderr.read().decode()[-2000:]}")
            if log.exists() and log.read_bytes().count(b"\n") >= min_records:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the tuner logged fewer than {min_records} records in {timeout} s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_resume_after_sigkill_keeps_every_record_and_measures_nothing_twice(tmp_path):
    log = tmp_path / "killed.json"
    run_until_killed(log, min_records=8)
    data = log.read_bytes()
    if data.endswith(b"\n"):  # killed between writes: tear a last line as a mid-write kill would
        last = data[:-1].rsplit(b"\n", 1)[-1]
        with open(log, "ab") as f:
            f.write(last[: len(last) // 2])
    complete = data[: data.rfind(b"\n") + 1]
    with pytest.warns(UserWarning, match="not a valid record"):
        before = list(load_records(str(log)))  # the torn line is skipped
    n_before = len(before)
    assert n_before >= 8 and n_before == complete.count(b"\n")
    best_before = min(res.mean_cost for _, res in before)

    t = task()
    with pytest.warns(UserWarning, match="not a valid record"):
        policy, n = resumed_policy(t, log)
    assert n == n_before and len(policy.measured) == n_before
    res, m = tune(t, log, 8, 4, policy)

    assert policy.cost_model.known_at_predict[0] == n_before
    assert log.read_bytes().startswith(complete)  # every record before the kill is kept
    with pytest.warns(UserWarning, match="not a valid record") as caught:
        after = list(load_records(str(log)))
    assert len([w for w in caught if "valid record" in str(w.message)]) == 1  # only the torn line
    assert "skipped 1 line" in str(caught[0].message)
    assert len(after) == n_before + 8
    with pytest.warns(UserWarning, match="not a valid record"):
        fps = fingerprints(log)
    assert len(set(fps)) == len(fps)  # nothing measured twice, before or after the kill
    assert res.best_cost <= best_before
