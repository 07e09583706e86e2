"""measure.timing_plan: the worker's calibration, repeats and early stop, on a fake timer."""

from __future__ import annotations

import pytest

from measure.timing_plan import TRUSTED_FRACTION, TimingSettings, time_candidate


class FakeTimer:
    """Readings of `ms_per_run` per run plus `overhead_ms` per reading (a probe's fixed cost),
    logging each call as ("probe", number) or ("repeats", number, count)."""

    def __init__(
        self,
        ms_per_run: float,
        probe_counts: bool = False,
        batches_repeats: bool = True,
        overhead_ms: float = 0.0,
        later_ms_per_run: float | None = None,
    ) -> None:
        self.ms_per_run, self.overhead_ms = ms_per_run, overhead_ms
        self.later_ms_per_run = later_ms_per_run  # per run after the probe (a warmer GPU)
        self.probe_counts, self.batches_repeats = probe_counts, batches_repeats
        self.calls: list[tuple] = []

    def probe(self, number: int) -> tuple[int, float]:
        self.calls.append(("probe", number))
        return number, number * self.ms_per_run + self.overhead_ms

    def repeats(self, number: int, count: int) -> tuple[int, list[float]]:
        self.calls.append(("repeats", number, count))
        per_run = self.later_ms_per_run or self.ms_per_run
        return number, [number * per_run] * count


GRAPH = {"probe_counts": False, "batches_repeats": True}  # a probe led in by the spin kernel
REPLAY_PROBE = {"probe_counts": True, "batches_repeats": True}  # graphs, no spin kernel
BACK_TO_BACK = {"probe_counts": True, "batches_repeats": False}


def settings(bound: float | None = None, **kw) -> TimingSettings:
    return TimingSettings(
        **{"number": 3, "repeat": 3, "min_repeat_ms": 5.0, **kw}, cost_bound=bound
    )


def test_graph_timing_probes_once_then_times_every_repeat_in_one_call():
    timer = FakeTimer(0.1, **GRAPH)
    timing = time_candidate(timer, settings())
    assert timer.calls == [("probe", 3), ("repeats", 53, 3)]  # 5.25 ms / 0.1 ms a run
    assert timing.costs == pytest.approx([1e-4] * 3) and not timing.stopped_early


def test_a_spin_led_probe_never_counts_as_a_repeat():
    """A probe that already lasts min_repeat_ms was led in by the spin kernel, not by its own
    work: the repeats are timed apart, all of them after their own lead-in."""
    timer = FakeTimer(2.0, **GRAPH)
    timing = time_candidate(timer, settings())
    assert timer.calls == [("probe", 3), ("repeats", 3, 3)]
    assert len(timing.costs) == 3


def test_a_probe_led_in_as_a_repeat_counts_as_one():
    timer = FakeTimer(2.0, **REPLAY_PROBE)
    timing = time_candidate(timer, settings())
    assert timer.calls == [("probe", 3), ("repeats", 3, 2)]
    assert len(timing.costs) == 3


def test_back_to_back_calibrates_one_reading_at_a_time_and_the_last_counts():
    timer = FakeTimer(0.1, overhead_ms=0.2, **BACK_TO_BACK)
    timing = time_candidate(timer, settings())
    # 0.5 ms for 3 runs overestimates a run: 32 runs give 3.2 ms, then 53 runs 5.3 ms
    assert timer.calls == [("probe", 3), ("repeats", 32, 1), ("repeats", 53, 1), ("repeats", 53, 2)]
    assert len(timing.costs) == 3


def test_a_calibration_that_falls_short_is_timed_again():
    """The probe's time per run was slow (a cold GPU): the repeats of the number it predicted
    last less than min_repeat_ms, so they only calibrate, and the repeats are timed again."""
    timer = FakeTimer(0.1, later_ms_per_run=0.08, **GRAPH)
    timing = time_candidate(timer, settings())
    assert timer.calls == [("probe", 3), ("repeats", 53, 3), ("repeats", 66, 3)]
    assert timing.costs == pytest.approx([8e-5] * 3)


def test_a_candidate_within_the_bound_is_timed_exactly_as_without_one():
    """Back-to-back, each calibration reading can stop a candidate: a bound adds no call."""
    plain, bounded = (FakeTimer(0.1, overhead_ms=0.1, **BACK_TO_BACK) for _ in range(2))
    expected = time_candidate(plain, settings())
    timing = time_candidate(bounded, settings(bound=1.5e-4))
    assert bounded.calls == plain.calls and timing == expected


@pytest.mark.parametrize("kind", [GRAPH, REPLAY_PROBE], ids=lambda k: str(k))
def test_timing_in_one_call_first_probes_for_a_trusted_reading(kind):
    """Graph replays time every repeat in one call: with a bound, a probe aimed at a trusted
    reading (1.05 ms of 0.1 ms runs) comes first; a candidate it shows within the bound then
    gets the same repeats, and the same costs, as without one."""
    plain, bounded = (FakeTimer(0.1, **kind) for _ in range(2))
    expected = time_candidate(plain, settings())
    timing = time_candidate(bounded, settings(bound=1.5e-4))
    assert bounded.calls == [("probe", 3), ("probe", 11), *plain.calls[1:]]
    assert timing == expected


@pytest.mark.parametrize("kind", [GRAPH, REPLAY_PROBE], ids=lambda k: str(k))
def test_timing_in_one_call_stops_at_the_trusted_probe(kind):
    timer = FakeTimer(0.1, **kind)
    timing = time_candidate(timer, settings(bound=5e-5))
    assert timer.calls == [("probe", 3), ("probe", 11)]
    assert timing.stopped_early and timing.costs == pytest.approx([1e-4])


def test_probes_for_trust_until_one_lasts_long_enough():
    """A fixed cost per probe makes the first estimate of a run too slow: the probes go on
    until one lasts a fifth of a repeat."""
    timer = FakeTimer(0.1, overhead_ms=0.3, **GRAPH)
    time_candidate(timer, settings(bound=5e-5))
    assert timer.calls == [("probe", 3), ("probe", 6), ("probe", 7)]  # 0.6, 0.9, 1.0 ms


@pytest.mark.parametrize("kind", [GRAPH, REPLAY_PROBE, BACK_TO_BACK], ids=lambda k: str(k))
def test_a_candidate_a_trusted_probe_shows_slower_than_the_bound_stops_there(kind):
    timer = FakeTimer(1.0, **kind)  # 3 ms for the probe: trusted, and 1 ms a run
    timing = time_candidate(timer, settings(bound=5e-4))
    assert timer.calls == [("probe", 3)]
    assert timing.stopped_early and timing.costs == pytest.approx([1e-3])


def test_a_probe_too_short_to_trust_does_not_stop_a_candidate():
    """0.3 ms of fixed cost makes 3 runs of 0.1 ms look 0.2 ms each, over the bound of 0.15:
    too short a reading to trust (under a fifth of min_repeat_ms), so calibration goes on, and
    its first reading, trusted, shows the candidate within the bound."""
    assert 0.6 < 5.0 * TRUSTED_FRACTION
    timer = FakeTimer(0.1, overhead_ms=0.3, **GRAPH)
    timing = time_candidate(timer, settings(bound=1.5e-4))
    assert not timing.stopped_early and len(timing.costs) == 3


def test_back_to_back_stops_at_the_first_trusted_calibration_reading_over_the_bound():
    timer = FakeTimer(0.1, overhead_ms=0.2, **BACK_TO_BACK)
    timing = time_candidate(timer, settings(bound=5e-5))
    assert timer.calls == [("probe", 3), ("repeats", 32, 1)]  # 3.2 ms: trusted, 0.1 ms a run
    assert timing.stopped_early and timing.costs == pytest.approx([1e-4])


def test_with_a_cooldown_the_first_full_repeat_can_stop_it():
    """With a cooldown each repeat is its own call (a sleep between): once the first full
    repeat shows the candidate slower than the bound, the others are not timed."""
    slept: list[float] = []
    timer = FakeTimer(0.1, later_ms_per_run=0.2, **GRAPH)
    timing = time_candidate(timer, settings(bound=1.5e-4, cooldown=0.01), sleep=slept.append)
    assert timer.calls == [("probe", 3), ("repeats", 53, 1)]
    assert timing.stopped_early and timing.costs == pytest.approx([2e-4]) and not slept


def test_a_cooldown_sleeps_between_repeats_timed_one_at_a_time():
    slept: list[float] = []
    timer = FakeTimer(2.0, **REPLAY_PROBE)
    timing = time_candidate(timer, settings(cooldown=0.01), sleep=slept.append)
    assert timer.calls == [("probe", 3), ("repeats", 3, 1), ("repeats", 3, 1)]
    assert slept == [0.01, 0.01] and len(timing.costs) == 3


def test_a_full_timing_reached_during_calibration_is_never_marked_stopped():
    """The repeats timed in the calibration's call are the full timing: a bound they exceed
    (the trusted probe showed the candidate within it) does not make them a stopped timing."""
    timer = FakeTimer(0.1, later_ms_per_run=0.2, **GRAPH)
    timing = time_candidate(timer, settings(bound=1.5e-4))
    assert timer.calls == [("probe", 3), ("probe", 11), ("repeats", 53, 3)]  # 10.6 ms each
    assert not timing.stopped_early and len(timing.costs) == 3


def test_number_stops_growing_at_max_number():
    timer = FakeTimer(1e-6, **GRAPH)
    timing = time_candidate(timer, settings(max_number=1000))
    assert timer.calls == [("probe", 3), ("repeats", 1000, 3)]
    assert len(timing.costs) == 3


def test_settings_from_a_request():
    req = {"number": 3, "repeat": 0, "min_repeat_ms": 5, "cooldown": None}
    s = TimingSettings.from_request(req, sets=43)
    assert (s.number, s.repeat, s.cooldown, s.cost_bound) == (43, 1, 0.0, None)
    assert TimingSettings.from_request({**req, "cost_bound": 2e-4}).cost_bound == 2e-4
