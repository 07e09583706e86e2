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


def test_warm_up_round_tunes_every_task_once_most_flops_first():
    """Warm-up rounds of half the budget over the tasks (8 each here), the largest task
    first, then rounds of the full size."""
    sched, res = schedule(heavy_and_light(), total=5 * 16)
    assert [r["task"] for r in res.history[:5]] == [0, 2, 3, 4, 1]
    assert [r["trials"] for r in res.history] == [8] * 5 + [16, 16, 8]
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
    assert [r["task"] for r in res.history[:4]] == [2, 3, 4, 1]
    assert res.trials[0] >= 48 and res.best_costs[0] <= 4e-3
    assert sched.round_bests[0][:3] == [5e-3, 5e-3, 4e-3]  # cut into rounds of 16


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
    assert len(out) == 3 and "est. end-to-end" in out[1] and "task   1" in out[1]
    assert "(1 in PyTorch)" in out[0] and "in PyTorch" not in out[1]


def test_unknown_strategy_and_mismatched_lengths_are_refused():
    with pytest.raises(AutoschedError, match="unknown strategy"):
        TaskScheduler(tasks(1), None, [CurveTuner(1, 1, 1)], strategy="greedy")
    with pytest.raises(AutoschedError, match="same length"):
        TaskScheduler(tasks(2), [1.0], [CurveTuner(1, 1, 1)] * 2)
    with pytest.raises(AutoschedError, match="same length"):
        TaskScheduler(tasks(2), None, [CurveTuner(1, 1, 1)] * 2, fallback_costs=[1.0])
    with pytest.raises(AutoschedError, match="positive seconds"):
        TaskScheduler(tasks(1), None, [CurveTuner(1, 1, 1)], fallback_costs=[0.0])


class TimedCurveTuner(CurveTuner):
    """A CurveTuner whose rounds move a shared test clock by `seconds_per_trial` a trial."""

    def __init__(self, clock, seconds_per_trial, *args, **kw):
        super().__init__(*args, **kw)
        self.clock, self.seconds_per_trial = clock, seconds_per_trial
        self.started_at: list[float] = []

    def tune(self, n: int):
        self.started_at.append(self.clock.now)
        self.clock.now += n * self.seconds_per_trial
        return super().tune(n)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def many_tasks(n: int):
    """n distinct small matmul tasks (a model's worth)."""
    return [
        autosched.SearchTask("matmul", (8 + 8 * (i % 6), 8 + 8 * (i // 6), 8)) for i in range(n)
    ]


@pytest.mark.parametrize("budget", [31, 100, 248, 1500])
def test_every_task_gets_measured_trials_under_any_budget(budget):
    """31 tasks (ResNet-50's count): the warm-up shrinks so that none is left untuned."""
    tuners = [CurveTuner(1e3 * US, 0.5e3 * US, 40) for _ in range(31)]
    sched = TaskScheduler(many_tasks(31), None, tuners, num_measures_per_round=64, verbose=0)
    res = sched.tune(budget)
    assert res.total_trials == budget
    assert min(res.trials) >= 1 and not res.fallback_tasks
    assert math.isfinite(res.latency)


def test_untuned_tasks_count_at_their_fallback_cost_so_the_estimate_is_never_inf():
    fallback = [2e-3, 1e-3, 3e-3]
    tuners = [CurveTuner(10e3 * US, 1e3 * US, 2000), *heavy_and_light()[1:3]]
    sched = TaskScheduler(
        tasks(3), [1, 2, 1], tuners, fallback_costs=fallback, num_measures_per_round=16, verbose=0
    )
    assert sched.latency() == pytest.approx(2e-3 + 2 * 1e-3 + 3e-3)
    res = sched.tune(1)  # one trial: the task of most expected time (weight x fallback)
    assert res.trials == [0, 0, 1]
    assert res.fallback_tasks == [0, 1]
    assert res.latency == pytest.approx(2e-3 + 2 * 1e-3 + res.best_costs[2])
    res = sched.tune(100)
    assert all(math.isfinite(r["latency_us"]) for r in res.history) and not res.fallback_tasks
    text = res.summary(["a", "b", "c"])
    assert "tuned 3 of 3 tasks with 100 trials" in text and "PyTorch" not in text


def test_the_summary_names_the_tasks_left_in_pytorch():
    sched = TaskScheduler(
        tasks(3), None, heavy_and_light()[:3], fallback_costs=[1.0, 1.0, 1.0], verbose=0
    )
    res = sched.tune(2)  # fewer trials than tasks
    assert res.trials == [1, 1, 0] and res.fallback_tasks == [2]
    lines = res.summary(["conv", "dense", "softmax"]).splitlines()
    assert lines[0].startswith("tuned 2 of 3 tasks with 2 trials")
    assert "1 task(s) without a kernel run in PyTorch" in lines[2] and "2 softmax" in lines[2]
    bare = TaskScheduler(tasks(2), None, heavy_and_light()[:2], verbose=0).result()
    assert "unknown" in bare.summary()  # no kernel and no fallback cost


def test_a_time_budget_stops_giving_rounds_when_the_time_is_up():
    clock = Clock()
    tuners = [TimedCurveTuner(clock, 0.5, 1e3 * US, 0.5e3 * US, 40) for _ in range(5)]
    sched = TaskScheduler(tasks(5), None, tuners, num_measures_per_round=16, verbose=0, clock=clock)
    res = sched.tune(time_budget_s=100.0)
    starts = [t for tuner in tuners for t in tuner.started_at]
    assert max(starts) < 100.0 <= clock.now  # no round started after the deadline
    assert clock.now < 100.0 + 16 * 0.5  # and the last one ended within its length
    assert min(res.trials) >= 8 and res.total_trials == res.measured
    assert res.tuning_s == clock.now and res.trials_per_s == pytest.approx(2.0)
    more = sched.tune(res.total_trials + 16, time_budget_s=1000.0)  # the trial budget first
    assert more.total_trials == res.total_trials + 16


def test_a_time_budget_sizes_the_warm_up_from_the_rate_seen():
    """Slow trials (0.2 s each) and 15 s for 31 tasks: the first round (8 trials, the size
    before any rate is known) shows that about 67 trials fit in the time left, so the other
    warm-up rounds shrink to 2 trials and every task is measured in time."""
    clock = Clock()
    tuners = [TimedCurveTuner(clock, 0.2, 1e3 * US, 0.5e3 * US, 40) for _ in range(31)]
    sched = TaskScheduler(
        many_tasks(31), None, tuners, num_measures_per_round=64, verbose=0, clock=clock
    )
    res = sched.tune(time_budget_s=15.0)
    assert [r["trials"] for r in res.history[:3]] == [8, 2, 2]
    assert min(res.trials) >= 1


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
