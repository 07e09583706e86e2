"""The tuning loop (`auto_schedule.run_trials`) pipelined and not: every trial measured once,
the next search overlapping the current measurement, failures and interrupts losing no record,
and the per-round progress (trials/s, GPU busy, the wall-time split).

A fake policy hands out numbered states and a fake measurer "times" them with short sleeps, so
these tests take milliseconds; tests/test_search.py runs the real search end to end."""

from __future__ import annotations

import collections
import math
import threading
import time
from types import SimpleNamespace

import pytest

from autosched.errors import OptionError
from autosched.records import MeasureRecordResult, now
from autosched.search import auto_schedule
from autosched.search.auto_schedule import BestSoFar, TuningOptions, run_trials
from autosched.search.background import first_done
from autosched.search.progress import RoundTimes, Span, progress_line
from measure import MeasureErrorKind

TASK = SimpleNamespace(compute_dag=SimpleNamespace(flop_count=1e6))
STEP = 0.02  # seconds a fake search or measurement takes


class Log:
    """(event, round-ish number, perf_counter) in the order they happened, from any thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, float]] = []
        self.lock = threading.Lock()

    def add(self, event: str, n: int) -> None:
        with self.lock:
            self.events.append((event, n, time.perf_counter()))

    def at(self, event: str, n: int) -> float:
        return next(t for e, k, t in self.events if (e, k) == (event, n))


class CountingPolicy:
    """Hands out states 0, 1, 2, ... (at most `space`), STEP seconds a round; raises
    `fail_with` at search number `fail_at`. `searched[k]` is set when search k has ended."""

    def __init__(self, log: Log, space: int = 10**6, fail_at: int = 0, fail_with=None) -> None:
        self.log, self.space = log, space
        self.fail_at, self.fail_with = fail_at, fail_with
        self.next = 0
        self.searches = 0
        self.measured: dict[int, float] = {}
        self.updates: list[list[int]] = []
        self.updates_seen: list[int] = []  # model updates made before each search
        self.last_round: dict[str, float] = {}
        self.searched = collections.defaultdict(threading.Event)

    def search_one_round(self, num_measure: int) -> list:
        self.searches += 1
        self.updates_seen.append(len(self.updates))
        self.log.add("search start", self.searches)
        if self.searches == self.fail_at:
            raise self.fail_with
        time.sleep(STEP)
        batch = list(range(self.next, min(self.space, self.next + num_measure)))
        self.next += len(batch)
        self.last_round = {"search": float(self.searches)}
        self.log.add("search end", self.searches)
        self.searched[self.searches].set()
        return batch

    def add_measured(self, state, cost: float) -> None:
        assert state not in self.measured, "a state measured twice"
        self.measured[state] = cost

    def update_model(self, states, costs) -> None:
        self.updates.append(list(states))

    def best_state(self):
        return None


class SleepingMeasurer:
    """Costs 1 us + state ns; the states in `failing` fail (a wrong answer). A call takes
    `seconds`: the first half builds, the second is reported as
    running on the GPU. Call k's build ends only once
    `built_after[k]` is set, and the call only once `overlapped[k]` and `ends_after[k]` are
    (when there are). `started[k]` is set as call k starts."""

    def __init__(
        self,
        log: Log,
        failing=(),
        callbacks=(),
        seconds: float = STEP,
        overlapped: dict[int, threading.Event] | None = None,
        built_after: dict[int, threading.Event] | None = None,
        ends_after: dict[int, threading.Event] | None = None,
    ) -> None:
        self.log, self.seconds = log, seconds
        self.overlapped = overlapped or {}
        self.built_after = built_after or {}
        self.ends_after = ends_after or {}
        self.started = collections.defaultdict(threading.Event)  # set as call k starts
        self.failing = set(failing)
        self.callbacks = list(callbacks)
        self.calls = 0
        self.lock = threading.Lock()
        self.last_times = {"build": 0.0, "run": 0.0}

    def measure(self, states):
        with self.lock:  # the loop measures up to two batches at once, from two threads
            self.calls += 1
            call = self.calls
        self.log.add("measure start", call)
        self.started[call].set()
        time.sleep(self.seconds / 2)
        if call in self.built_after:  # call k's kernels compile until that event
            assert self.built_after[call].wait(timeout=5.0)
        self.log.add("built", call)
        time.sleep(self.seconds / 2)
        if call in self.overlapped:
            # the next search runs meanwhile: wait for it to end, so that the test does not
            # depend on how the threads are scheduled (a loop that does not overlap makes this
            # wait time out, and the test fail)
            assert self.overlapped[call].wait(timeout=5.0)
        if call in self.ends_after:
            assert self.ends_after[call].wait(timeout=5.0)
        results = [
            MeasureRecordResult((), int(MeasureErrorKind.WRONG_ANSWER), "mismatch", timestamp=now())
            if s in self.failing
            else MeasureRecordResult((1e-6 + s * 1e-9,), 0, "", timestamp=now())
            for s in states
        ]
        self.last_times = {"build": self.seconds / 2, "run": self.seconds / 2}
        for cb in self.callbacks:
            cb(states, results)
        self.log.add("measure end", call)
        return results

    def close(self) -> None:
        pass


def tune(policy, measurer, trials: int, per_round: int, pipeline: bool, **kw) -> list[dict]:
    opts = TuningOptions(trials, per_round, verbose=0, pipeline=pipeline, **kw)
    return run_trials(TASK, policy, measurer, opts, BestSoFar())  # type: ignore[arg-type]


@pytest.mark.parametrize("pipeline", [True, False])
def test_every_trial_is_measured_once_and_no_search_is_wasted(pipeline):
    log = Log()
    policy, measurer = CountingPolicy(log), SleepingMeasurer(log)
    history = tune(policy, measurer, trials=50, per_round=16, pipeline=pipeline)
    assert sorted(policy.measured) == list(range(50))
    assert [r["trials"] for r in history] == [16, 32, 48, 50]
    assert policy.next == 50, "a state was searched that this call will not measure"
    assert [len(u) for u in policy.updates] == [16, 16, 16, 2]
    assert [r["search_detail"]["search"] for r in history] == [1, 2, 3, 4]


def test_the_next_search_starts_before_the_measurement_ends():
    log = Log()
    policy = CountingPolicy(log)
    measurer = SleepingMeasurer(log, overlapped={k: policy.searched[k + 1] for k in (2, 3)})
    tune(policy, measurer, trials=64, per_round=16, pipeline=True)
    # the first batch is measured alone, so that the second is chosen by a trained model
    assert log.at("search start", 2) > log.at("measure end", 1)
    for k in (2, 3):
        assert log.at("search start", k + 1) < log.at("measure end", k)
    # the batch of round k+1 is chosen with the model of round k-1 (round 2's by round 1's)
    assert policy.updates_seen == [0, 1, 1, 2]


def test_the_next_search_runs_beside_the_builds_after_the_model_update():
    """The next search runs while the batch compiles (its workers behind the compilers); the
    model update of round k runs first, while round k+1's kernels are generated."""
    log = Log()
    policy = CountingPolicy(log)
    updates_at: list[float] = []
    record = policy.update_model
    policy.update_model = lambda s, c: (updates_at.append(time.perf_counter()), record(s, c))
    # round k's build ends only once search k+1 has: a loop that waits for the builds hangs
    measurer = SleepingMeasurer(log, built_after={k: policy.searched[k + 1] for k in (2, 3)})
    tune(policy, measurer, trials=64, per_round=16, pipeline=True)
    for k in (2, 3):
        assert log.at("measure start", k) <= log.at("search start", k + 1)
        assert log.at("search end", k + 1) <= log.at("built", k)
    # round 2's update (the second) runs while round 3 builds, before search 4
    assert log.at("measure start", 3) <= updates_at[1] < log.at("search start", 4)
    assert len(updates_at) == 4 and updates_at[-1] > log.at("measure end", 4)


def test_the_next_batch_compiles_beside_the_end_of_this_one():
    """Once the next search has ended, its batch is measured at once, beside the end of the
    batch before (whose last kernels still compile and run): batch k ends only after batch k+1
    has started, so a loop that waits for batch k first hangs (and fails the wait)."""
    log = Log()
    policy = CountingPolicy(log)
    measurer = SleepingMeasurer(log)
    measurer.ends_after = {k: measurer.started[k + 1] for k in (2, 3)}
    history = tune(policy, measurer, trials=64, per_round=16, pipeline=True)
    for k in (2, 3):
        assert log.at("search end", k + 1) <= log.at("measure start", k + 1)
        assert log.at("measure start", k + 1) < log.at("measure end", k)
    assert sorted(policy.measured) == list(range(64))
    assert [r["trials"] for r in history] == [16, 32, 48, 64]
    # still: the batch of round k+1 chosen by the model of round k-1
    assert policy.updates_seen == [0, 1, 1, 2]
    for rec in history:
        assert sum(rec["split_s"].values()) == pytest.approx(rec["wall_s"])


def test_a_batch_held_up_by_a_slow_compile_holds_up_no_search():
    """Batch 2 ends only once search 4 has: the loop takes batch 3, which ends first, trains
    on it and searches batch 4 beside batch 2's last compile. A loop that waits for the oldest
    batch first hangs (and fails the wait)."""
    log = Log()
    policy = CountingPolicy(log)
    measurer = SleepingMeasurer(log, ends_after={2: policy.searched[4]})
    history = tune(policy, measurer, trials=80, per_round=16, pipeline=True)
    assert log.at("search end", 4) < log.at("measure end", 2)
    assert log.at("measure end", 3) < log.at("search start", 4)
    assert sorted(policy.measured) == list(range(80))
    assert [r["trials"] for r in history] == [16, 32, 48, 64, 80]
    # rounds end in the order their batches did: 1, 3, 2, ...
    assert [r["search_detail"]["search"] for r in history][:3] == [1, 3, 2]
    # search 4 saw the updates of rounds 1 and 3; round 2's came later
    assert policy.updates_seen[3] == 2 and list(range(16, 32)) not in policy.updates[:2]


@pytest.mark.parametrize("pipeline", [True, False])
def test_early_stopping_measures_the_batch_in_flight_and_searches_no_more(pipeline):
    """The costs rise with the state, so round 1 holds the best: early stopping after 2 rounds
    ends the search; a batch already being measured is waited for and counted."""
    log = Log()
    policy = CountingPolicy(log)
    history = tune(policy, SleepingMeasurer(log), 160, 16, pipeline, early_stopping=2)
    rounds = 4 if pipeline else 3  # pipelined, round 4's batch was searched during round 3
    assert [r["trials"] for r in history] == [16 * k for k in range(1, rounds + 1)]
    assert sorted(policy.measured) == list(range(16 * rounds)), "a searched state not measured"


def test_without_pipeline_each_search_sees_every_measured_round():
    log = Log()
    policy = CountingPolicy(log)
    tune(policy, SleepingMeasurer(log), trials=64, per_round=16, pipeline=False)
    assert policy.updates_seen == [0, 1, 2, 3]


def test_without_pipeline_search_and_measurement_alternate():
    log = Log()
    tune(CountingPolicy(log), SleepingMeasurer(log), trials=48, per_round=16, pipeline=False)
    order = [(e, k) for e, k, _ in log.events]
    expected = []
    for k in (1, 2, 3):
        expected += [("search start", k), ("search end", k)]
        expected += [("measure start", k), ("built", k), ("measure end", k)]
    assert order == expected


@pytest.mark.parametrize("pipeline", [True, False])
def test_failing_candidates_cost_their_records_only(pipeline):
    log = Log()
    written = []
    measurer = SleepingMeasurer(
        log, failing={3, 17, 18}, callbacks=[lambda i, r: written.extend(r)]
    )
    policy = CountingPolicy(log)
    history = tune(policy, measurer, trials=32, per_round=8, pipeline=pipeline)
    assert len(written) == 32 and sum(not r.ok for r in written) == 3
    assert math.isinf(policy.measured[17]) and policy.measured[0] == pytest.approx(1e-6)
    assert [r["ok"] for r in history] == [7, 8, 6, 8]
    assert history[-1]["best_us"] == pytest.approx(1.0)


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("search bug")])
def test_an_interrupt_during_the_next_search_keeps_the_batch_being_measured(error):
    """Ctrl-C (or a search that raises) while round 2's batch is being measured: that batch's
    records are still written before the loop stops."""
    log = Log()
    written = []
    measurer = SleepingMeasurer(log, callbacks=[lambda i, r: written.extend(i)])
    policy = CountingPolicy(log, fail_at=3, fail_with=error)
    with pytest.raises(type(error)):
        tune(policy, measurer, trials=64, per_round=8, pipeline=True)
    assert written == list(range(16))


@pytest.mark.parametrize("pipeline", [True, False])
def test_ctrl_c_while_a_batch_is_measured_waits_for_its_records(pipeline, monkeypatch):
    """Ctrl-C comes while the loop waits for the second time (for the second batch and,
    pipelined, the third): every batch in flight is waited for and its records written. The
    KeyboardInterrupt is raised where the loop waits, as a SIGINT raises it there: an interrupt
    sent from the measuring thread (`_thread.interrupt_main`) was now and then lost."""
    log = Log()
    written = []
    measurer = SleepingMeasurer(log, callbacks=[lambda i, r: written.extend(i)])
    policy = CountingPolicy(log)

    waits = []

    def ctrl_c_in_the_second_wait(tasks, poll=0.02):
        waits.append(len(tasks))
        if len(waits) == 2:
            raise KeyboardInterrupt
        return first_done(tasks, poll)

    monkeypatch.setattr(auto_schedule, "first_done", ctrl_c_in_the_second_wait)
    with pytest.raises(KeyboardInterrupt):
        tune(policy, measurer, trials=64, per_round=8, pipeline=pipeline)
    assert waits == ([1, 2] if pipeline else [1, 1])
    in_flight = 3 if pipeline else 2  # the batches measured or started when Ctrl-C came
    assert measurer.calls == in_flight
    assert sorted(written) == list(range(8 * in_flight))
    assert sorted(policy.measured) == list(range(8)), "the loop stopped at the interrupt"


def test_an_exhausted_space_ends_the_loop():
    log = Log()
    policy = CountingPolicy(log, space=20)
    history = tune(policy, SleepingMeasurer(log), trials=64, per_round=8, pipeline=True)
    assert [r["trials"] for r in history] == [8, 16, 20]
    assert sorted(policy.measured) == list(range(20))


def test_each_round_records_trials_per_second_gpu_busy_and_the_wall_split():
    log = Log()
    policy = CountingPolicy(log)
    measurer = SleepingMeasurer(log, overlapped={k: policy.searched[k + 1] for k in (2, 3)})
    history = tune(policy, measurer, 64, 16, pipeline=True)
    for rec in history:
        split = rec["split_s"]
        assert set(split) == {"search", "build", "gpu", "idle"}
        assert sum(split.values()) == pytest.approx(rec["wall_s"])
        assert split["gpu"] == pytest.approx(STEP / 2)  # half of the measurement, as reported
        # the build inside the window: a batch may start compiling before it (see the next test)
        assert 0 < split["build"] <= rec["measure_s"] - STEP / 2 + 1e-9
        assert rec["gpu_busy"] == pytest.approx(split["gpu"] / rec["wall_s"])
        assert rec["trials_per_s"] == pytest.approx(16 / rec["wall_s"])
    # rounds 1 and 2 wait for their own searches (the first batch is measured alone)
    assert history[0]["split_s"]["search"] >= STEP and history[1]["split_s"]["search"] >= STEP
    line = progress_line(history[0], 16)
    assert f"{history[0]['trials_per_s']:6.1f} trials/s" in line
    assert f"GPU busy {history[0]['gpu_busy']:4.0%}" in line


def test_search_hidden_behind_a_measurement_is_not_waited_for():
    """The wall split of a window of 10 s: searches 0-2 s and 3-7 s, a measurement 2-8 s (4 s
    build, 2 s GPU): the second search ran behind the measurement, the loop waited for the
    first only; what is left is idle."""
    times = RoundTimes(
        window=Span(0.0, 10.0),
        search=2.0,
        measure=Span(2.0, 8.0),
        build=4.0,
        run=2.0,
        model=1.0,
        searches=[Span(0.0, 2.0), Span(3.0, 7.0)],
    )
    assert times.split() == {"search": 2.0, "build": 4.0, "gpu": 2.0, "idle": 2.0}
    late = RoundTimes(Span(0.0, 10.0), 2.0, Span(0.0, 6.0), 4.0, 2.0, 1.0, [Span(5.0, 8.0)])
    assert late.split()["search"] == pytest.approx(2.0)  # 6-8 s: after the measurement ended


def test_a_measurement_started_before_the_window_counts_its_part_inside_it():
    """Batch k+1 started compiling 2 s before round k ended: of its 6 s (4 s build, 2 s GPU),
    the 4 s inside its window count, the GPU's 2 s first; the parts add up to the window."""
    times = RoundTimes(Span(5.0, 10.0), 1.0, Span(3.0, 9.0), 4.0, 2.0, 0.5, [])
    assert times.split() == {"search": 0.0, "build": 2.0, "gpu": 2.0, "idle": 1.0}


def test_the_progress_line_is_printed_each_round(capsys):
    log = Log()
    opts = TuningOptions(32, 16, verbose=1)
    run_trials(TASK, CountingPolicy(log), SleepingMeasurer(log), opts, BestSoFar())  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("trials/s  GPU busy" in line for line in lines)


def test_no_trials_asked_for_searches_nothing():
    log = Log()
    policy = CountingPolicy(log)
    assert tune(policy, SleepingMeasurer(log), trials=0, per_round=8, pipeline=True) == []
    assert policy.searches == 0


def test_pipeline_is_true_or_false():
    with pytest.raises(OptionError, match="pipeline must be True or False"):
        TuningOptions(pipeline="no")  # type: ignore[arg-type]
