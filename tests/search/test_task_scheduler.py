"""The task scheduler on simulated latency curves (each task's best latency a function of the
trials it received), and once end to end: two tiny tasks through the real tuning loop with the
interpreter-based test measurer, one shared log, then resumed from that log."""

from __future__ import annotations

import json
import math

import pytest

import autosched
from autosched.errors import AutoschedError
from autosched.records import load_records
from autosched.search.policy import SearchParams
from autosched.search.task_list import read_task_list, task_list_path
from autosched.search.task_scheduler import SchedulerParams, TaskScheduler, weighted_sum
from autosched.search.task_similarity import similarity_groups
from autosched.search.tune_model import tune_tasks
from tests.sim_measurer import SimulatedMeasurer

US = 1e-6


class CurveTuner:
    """Stands in for "tune task i for k trials": its best latency after t trials is
    `floor + (start - floor) * exp(-t / tau)`. `interrupt_at`: raise KeyboardInterrupt on that
    call (1-based), as Ctrl-C during a round would."""

    def __init__(self, start, floor, tau, curve=(), interrupt_at=None):
        self.start, self.floor, self.tau = start, floor, tau
        self.curve = list(curve)
        self.trials = len(self.curve)
        self.calls = 0
        self.interrupt_at = interrupt_at

    def latency(self, t: int) -> float:
        return self.floor + (self.start - self.floor) * math.exp(-t / self.tau)

    def tune(self, n: int):
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        self.trials += n
        return n, self.latency(self.trials)

    def best(self):
        return (self.latency(self.trials), f"state@{self.trials}") if self.trials else None


def tasks(n: int):
    """n tasks of different operators and sizes (only their FLOPs and structure matter)."""
    sizes = [(64, 64, 64), (8, 8, 8), (16, 16, 8), (8, 16, 16), (16, 8, 8)]
    return [autosched.SearchTask("matmul", s) for s in sizes[:n]]


def heavy_and_light(**kw):
    """One heavy, slowly converging task (10 ms -> 1 ms over thousands of trials) and four
    light ones that converge in a few dozen trials: what most trials should go to is clear."""
    return [CurveTuner(10e3 * US, 1e3 * US, 2000, **kw)] + [
        CurveTuner(1e3 * US, 0.5e3 * US, 40) for _ in range(4)
    ]


def schedule(tuners, strategy="gradient", weights=None, total=1600, per_round=16, **params):
    sched = TaskScheduler(
        tasks(len(tuners)),
        weights,
        tuners,
        strategy=strategy,
        num_measures_per_round=per_round,
        params=SchedulerParams(**params),
        verbose=0,
    )
    return sched, sched.tune(total)


def test_gradient_beats_round_robin_at_equal_trials():
    _, grad = schedule(heavy_and_light())
    _, rr = schedule(heavy_and_light(), strategy="round-robin")
    assert grad.total_trials == rr.total_trials == 1600
    assert grad.latency < 0.8 * rr.latency
    assert grad.trials[0] > 2 * rr.trials[0]  # the heavy task got the trials
    assert rr.trials == [320] * 5


def test_weights_steer_the_trials():
    """The same five curves; a light task that runs 50 times per inference is worth tuning."""
    _, plain = schedule(heavy_and_light(), total=800)
    _, weighted = schedule(heavy_and_light(), weights=[1, 50, 1, 1, 1], total=800)
    assert weighted.trials[1] > plain.trials[1]
    assert weighted.latency == pytest.approx(
        weighted_sum([1, 50, 1, 1, 1])(weighted.best_costs), rel=1e-12
    )


def test_warm_up_round_tunes_every_task_once_in_order():
    sched, res = schedule(heavy_and_light(), total=5 * 16)
    assert [r["task"] for r in res.history] == [0, 1, 2, 3, 4]
    assert res.trials == [16] * 5
    assert all(math.isfinite(c) for c in res.best_costs)
    assert res.latency == pytest.approx(sum(res.best_costs))


def test_without_exploration_the_steepest_task_is_always_picked():
    _, res = schedule(heavy_and_light(), total=50 * 16, eps_greedy=0.0)
    after_warm_up = [r["task"] for r in res.history[5:]]
    assert after_warm_up.count(0) > 0.8 * len(after_warm_up)


def test_eps_greedy_explores_and_a_seed_makes_it_deterministic():
    def picks(seed, eps):
        _, res = schedule(heavy_and_light(), total=60 * 16, eps_greedy=eps, seed=seed)
        return [r["task"] for r in res.history]

    assert picks(3, 0.5) == picks(3, 0.5)
    assert picks(3, 0.5) != picks(4, 0.5)
    greedy, explore = picks(3, 0.0)[5:], picks(3, 1.0)[5:]
    assert set(explore) == {0, 1, 2, 3, 4}  # random picks reach every task
    assert explore.count(0) < greedy.count(0)


def test_interrupt_returns_the_best_so_far_and_tune_goes_on():
    tuners = heavy_and_light()
    tuners[0].interrupt_at = 3
    sched, res = schedule(tuners, total=1600)
    assert res.interrupted
    assert res.best_costs == [t.latency(t.trials) for t in tuners]
    assert res.best_states[0] == (tuners[0].latency(32), "state@32")
    assert res.total_trials == sum(t.trials for t in tuners)
    more = sched.tune(1600)  # calling again continues from there
    assert not more.interrupted and more.total_trials == 1600
    assert more.latency < res.latency


def test_tune_can_be_resumed_with_a_larger_budget():
    sched, first = schedule(heavy_and_light(), total=400)
    second = sched.tune(800)
    assert first.total_trials == 400 and second.total_trials == 800
    assert second.history[: len(first.history)] == first.history


def test_preloaded_curves_skip_the_warm_up_of_logged_tasks():
    """A task with records in the log (its best-so-far curve) starts from them."""
    logged = CurveTuner(10e3 * US, 1e3 * US, 2000, curve=[5e-3] * 40 + [4e-3] * 8)
    tuners = [logged] + [CurveTuner(1e3 * US, 0.5e3 * US, 40) for _ in range(4)]
    sched, res = schedule(tuners, total=48 + 4 * 16, eps_greedy=0.0)
    assert [r["task"] for r in res.history] == [1, 2, 3, 4]
    assert res.trials[0] == 48 and res.best_costs[0] == 4e-3
    assert sched.round_bests[0] == [5e-3, 5e-3, 4e-3]  # cut into rounds of 16


def test_early_stopping_per_task_retires_a_converged_task():
    flat = CurveTuner(1e-3, 1e-3, 1)  # never improves after its first round
    tuners = heavy_and_light()[:1] + [flat]
    _, res = schedule(tuners, total=640, early_stopping_per_task=32, eps_greedy=1.0)
    assert res.trials[1] <= 48


def test_a_custom_objective_is_followed():
    """Minimising the slowest task: the scheduler equalises rather than weighting by size."""
    tuners = heavy_and_light()
    sched = TaskScheduler(
        tasks(5), None, tuners, objective=max, num_measures_per_round=16, verbose=0
    )
    res = sched.tune(800)
    assert res.latency == max(res.best_costs)
    assert res.trials[0] > 600


def test_similar_tasks_are_grouped_by_structure_and_flops():
    ts = [
        autosched.SearchTask("matmul", (64, 64, 64)),
        autosched.SearchTask("matmul", (64, 64, 60)),
        autosched.SearchTask("matmul", (8, 8, 8)),
    ]
    assert similarity_groups(ts) == [[0, 1], [0, 1], [2]]


def test_round_progress_is_printed(capsys):
    sched = TaskScheduler(tasks(2), [1, 2], heavy_and_light()[:2], num_measures_per_round=16)
    sched.tune(32)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "est. end-to-end" in out[1] and "task   1" in out[1]


def test_unknown_strategy_and_mismatched_lengths_are_refused():
    with pytest.raises(AutoschedError, match="unknown strategy"):
        TaskScheduler(tasks(1), None, [CurveTuner(1, 1, 1)], strategy="greedy")
    with pytest.raises(AutoschedError, match="same length"):
        TaskScheduler(tasks(2), [1.0], [CurveTuner(1, 1, 1)] * 2)


PARAMS = SearchParams(population=32, generations=1, sample_init_min_population=16, n_jobs=1)


def test_two_tasks_share_one_log_and_resume_from_it(tmp_path):
    log = str(tmp_path / "model.json")
    ts = [autosched.SearchTask("matmul", (16, 16, 8)), autosched.SearchTask("matmul", (8, 8, 8))]
    measurers = []

    def factory(task, callbacks):
        measurers.append(SimulatedMeasurer(task, callbacks))
        return measurers[-1]

    def run(total):
        model = autosched.XGBModel(nthread=1, seed=0)
        res = tune_tasks(
            ts,
            [3, 1],
            log,
            total,
            num_measures_per_round=8,
            search_params=PARAMS,
            cost_model=model,
            measurer_factory=factory,
            verbose=0,
        )
        return res, model

    first, _ = run(24)
    assert first.trials[0] + first.trials[1] == 24 and min(first.trials) >= 8
    assert all(math.isfinite(c) for c in first.best_costs)
    records = list(load_records(log))
    assert len(records) == 24
    assert {i.workload_key for i, _ in records} == {t.workload_key for t in ts}
    listed = read_task_list(log)
    assert [(e["key"], e["weight"]) for e in listed] == [
        (t.workload_key, w) for t, w in [(ts[0], 3), (ts[1], 1)]
    ]
    assert json.load(open(task_list_path(log)))["tasks"][0]["name"] == ts[0].desc

    n_before = len(measurers)
    second, model = run(40)
    assert model.n_programs >= 24  # trained on the log before its first round
    assert second.total_trials == 40  # the log's 24 count toward the total
    assert sum(m.count for m in measurers[n_before:]) == 16
    assert all(b <= a for a, b in zip(first.best_costs, second.best_costs, strict=True))
    fps = [fp for m in measurers for fp in m.fingerprints]
    assert len(fps) == len(set(fps)) == 40  # nothing measured twice
    assert second.best_states[0][0] == second.best_costs[0]
