"""Rounds of several tasks in flight at once (`concurrent_rounds`, `TaskScheduler(parallel=)`):
simulated curves whose first rounds can only end together, and two tiny tasks through the real
tuning loop with the interpreter-based test measurer."""

from __future__ import annotations

import math
import threading

import pytest

import autosched
from autosched.records import load_records
from autosched.search.policy import SearchParams
from autosched.search.task_scheduler import TaskScheduler
from autosched.search.tune_model import tune_tasks
from tests.search.test_task_scheduler import CurveTuner, many_tasks
from tests.sim_measurer import SimulatedMeasurer

US = 1e-6


class Concurrency:
    """Counts the rounds running at once, per task and in all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: list[int] = []
        self.most = 0
        self.overlapping_same_task = False

    def enter(self, task: int) -> None:
        with self.lock:
            self.overlapping_same_task |= task in self.running
            self.running.append(task)
            self.most = max(self.most, len(self.running))

    def leave(self, task: int) -> None:
        with self.lock:
            self.running.remove(task)


class MeetingTuner(CurveTuner):
    """A CurveTuner whose first round waits at `barrier` for the other tuners' first rounds:
    the rounds can only end if the scheduler runs them at once."""

    def __init__(self, index, barrier, seen, *args):
        super().__init__(*args)
        self.index, self.barrier, self.seen = index, barrier, seen

    def tune(self, n: int):
        self.seen.enter(self.index)
        try:
            if self.calls == 0:
                self.barrier.wait(timeout=30)  # BrokenBarrierError: they did not run at once
            return super().tune(n)
        finally:
            self.seen.leave(self.index)


def test_rounds_of_different_tasks_run_at_once_within_the_budget():
    seen, barrier = Concurrency(), threading.Barrier(3)
    tuners = [MeetingTuner(i, barrier, seen, 1e3 * US, 0.5e3 * US, 40) for i in range(3)]
    tuners += [MeetingTuner(i, threading.Barrier(1), seen, 1e3 * US, 0.5e3 * US, 40)
               for i in range(3, 7)]  # fmt: skip
    sched = TaskScheduler(
        many_tasks(7), None, tuners, num_measures_per_round=16, verbose=0, parallel=3
    )
    res = sched.tune(400)
    assert res.total_trials == 400 and min(res.trials) >= 8
    assert seen.most == 3 and not seen.overlapping_same_task
    assert len(res.history) == sum(t.calls for t in tuners)
    assert math.isfinite(res.latency) and res.trials_per_s > 0


PARAMS = SearchParams(population=32, generations=1, sample_init_min_population=16, n_jobs=1)


def test_tasks_tuned_at_once_measure_every_state_once_into_one_log(tmp_path):
    log = str(tmp_path / "model.json")
    ts = [autosched.SearchTask("matmul", (16, 16, 8)), autosched.SearchTask("matmul", (8, 8, 8))]
    measurers: list[SimulatedMeasurer] = []

    def factory(task, callbacks):
        measurers.append(SimulatedMeasurer(task, callbacks))
        return measurers[-1]

    res = tune_tasks(
        ts,
        [1, 1],
        log,
        24,
        num_measures_per_round=8,
        search_params=PARAMS,
        cost_model=autosched.XGBModel(nthread=1, seed=0),
        measurer_factory=factory,
        parallel_tasks=2,
        verbose=0,
    )
    assert res.total_trials == 24 and min(res.trials) >= 8
    assert all(math.isfinite(c) for c in res.best_costs) and not res.fallback_tasks
    fps = [fp for m in measurers for fp in m.fingerprints]
    assert len(fps) == len(set(fps)) == 24
    assert len(list(load_records(log))) == 24
    assert res.measured == 24 and res.trials_per_s > 0


class FailingTuner(CurveTuner):
    def tune(self, n: int):
        if self.calls == 1:
            self.calls += 1
            raise RuntimeError("a bug in the search")
        return super().tune(n)


def test_ctrl_c_or_a_failed_round_waits_for_the_others_and_keeps_their_trials():
    tuners = [CurveTuner(1e3 * US, 0.5e3 * US, 40) for _ in range(4)]
    tuners[0].interrupt_at = 2
    sched = TaskScheduler(
        many_tasks(4), None, tuners, num_measures_per_round=8, verbose=0, parallel=2
    )
    res = sched.tune(400)
    assert res.interrupted and res.total_trials == sum(t.trials for t in tuners)
    assert sched.tune(400).total_trials == 400  # and it goes on from there

    tuners = [FailingTuner(1e3 * US, 0.5e3 * US, 40)]
    tuners += [CurveTuner(1e3 * US, 0.5e3 * US, 40) for _ in range(3)]
    sched = TaskScheduler(
        many_tasks(4), None, tuners, num_measures_per_round=8, verbose=0, parallel=2
    )
    with pytest.raises(RuntimeError, match="a bug in the search"):
        sched.tune(400)
    assert sum(sched.trials) == sum(t.trials for t in tuners) > 0


def test_by_default_two_tasks_a_gpu_and_five_more_are_tuned_at_once():
    """The GPUs' rounds, and rounds enough to keep the host's compilers and search busy too."""
    from autosched.search.tune_model import default_parallel_tasks

    assert [default_parallel_tasks(g) for g in (1, 2, 4)] == [7, 9, 13]
    assert default_parallel_tasks(0) == 7  # a context that counts no GPU measures on one
