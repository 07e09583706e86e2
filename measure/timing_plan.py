"""How a candidate is timed: the number of runs per repeat, the repeats, and when a slow
candidate stops early. The runner's worker (measure._worker) supplies the timer; the decisions
live here, apart from the GPU, so that they are tested with a fake timer.

A timing first calibrates: a probe times `number` runs (at least one per rotated buffer set) as
one reading; while a reading lasts less than `min_repeat_ms`, `number` is raised to what the
last reading says will last 5% more, and timed again (a short back-to-back probe overestimates
the time per run by the launch latency, so calibration converges from below, in two or three
readings, without overshooting). Then `repeat` consecutive repeats of that `number` make the
timing: seconds per run, one per repeat.

With a `cost_bound` (seconds per run; the search sends its task's best so far times a factor) a
candidate that a trusted reading shows slower than the bound stops there: its costs are the
readings it has (an honest GPU time of the kernel, from fewer runs). A reading is trusted once it
lasts `TRUSTED_FRACTION` of `min_repeat_ms`, long enough that the timer's fixed cost per reading
(a graph launch, a few microseconds) cannot make a kernel within the bound look slower than it.
A timer that times every repeat in one call (graph replays) would give a fast kernel no trusted
reading before its full timing, so with a bound its calibration first takes probes aimed at a
trusted reading (a fifth of a repeat), and only a candidate they show within the bound goes on
to its repeats. A candidate never shown slower than the bound is timed in full: the same
repeats of the same number of runs as without one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Protocol

MAX_NUMBER = 1 << 20  # runs of the launch sequence per repeat, at most
CALIBRATION_MARGIN = 1.05  # a calibrated repeat aims this far above min_repeat_ms
TRUSTED_FRACTION = 0.2  # of min_repeat_ms: how long a reading must last to stop a candidate
MIN_MS_PER_RUN = 1e-5  # a floor on a reading's time per run, against a zero reading


class RepeatTimer(Protocol):
    """What the plan times with: milliseconds of runs of the launch sequence.

    `probe_counts`: whether a probe reading is timed as a repeat is (then a probe that lasts
    `min_repeat_ms` counts as the first repeat). `batches_repeats`: whether each call pays a
    fixed lead-in, so that calibration past the probe times every repeat in one call."""

    probe_counts: bool
    batches_repeats: bool

    def probe(self, number: int) -> tuple[int, float]:
        """(runs timed, at least `number`; their milliseconds)."""
        ...

    def repeats(self, number: int, count: int) -> tuple[int, list[float]]:
        """(runs per repeat, at least `number`; milliseconds of `count` consecutive repeats)."""
        ...


@dataclasses.dataclass(frozen=True)
class TimingSettings:
    """A request's timing parameters. `cost_bound` None: every candidate is timed in full."""

    number: int
    repeat: int
    min_repeat_ms: float
    cooldown: float = 0.0
    cost_bound: float | None = None
    max_number: int = MAX_NUMBER

    @classmethod
    def from_request(cls, req: Mapping, sets: int = 1) -> TimingSettings:
        """The settings of a run request; a probe times every one of `sets` buffer sets."""
        bound = req.get("cost_bound")
        return cls(
            number=max(1, sets, int(req["number"])),
            repeat=max(1, int(req["repeat"])),
            min_repeat_ms=float(req["min_repeat_ms"]),
            cooldown=float(req.get("cooldown", 0) or 0),
            cost_bound=None if bound is None else float(bound),
        )

    def next_number(self, reading_ms: float, number: int, target_ms: float | None = None) -> int:
        """The number of runs the reading of `number` runs says will last 5% over `target_ms`
        (default min_repeat_ms; more than `number`, at most max_number)."""
        per_run = max(reading_ms / number, MIN_MS_PER_RUN)
        target = self.min_repeat_ms if target_ms is None else target_ms
        wanted = math.ceil(target * CALIBRATION_MARGIN / per_run)
        return min(self.max_number, max(number + 1, wanted))

    @property
    def trusted_ms(self) -> float:
        """How long a reading must last to stop a candidate at the bound."""
        return self.min_repeat_ms * TRUSTED_FRACTION

    def awaits_trust(self, readings_ms: list[float]) -> bool:
        """Whether a bound is set and none of these readings is yet long enough to trust."""
        return self.cost_bound is not None and max(readings_ms) < self.trusted_ms

    def shows_slower(self, readings_ms: list[float], number: int) -> bool:
        """Whether the fastest of these readings (of `number` runs each) is trusted and slower
        per run than the bound."""
        if self.cost_bound is None or not readings_ms:
            return False
        fastest = min(readings_ms)
        trusted = fastest >= self.trusted_ms
        return trusted and fastest / number * 1e-3 > self.cost_bound


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per run, one per repeat timed; `stopped_early` when the bound cut it short."""

    costs: list[float]
    stopped_early: bool = False


def _per_run(readings_ms: list[float], number: int) -> list[float]:
    return [ms / number * 1e-3 for ms in readings_ms]


def time_candidate(
    timer: RepeatTimer,
    settings: TimingSettings,
    sleep: Callable[[float], object] = time.sleep,
) -> Timing:
    """Calibrate, then time `settings.repeat` repeats, with `timer`; stop early at the bound."""
    s = settings
    number, reading = timer.probe(s.number)
    readings, counted = [reading], timer.probe_counts
    while True:
        calibrated = readings[-1] >= s.min_repeat_ms or number >= s.max_number
        if calibrated and counted and len(readings) >= s.repeat:
            break  # the calibration's last call timed every repeat: a full timing
        if s.shows_slower(readings, number):
            return Timing(_per_run(readings, number), stopped_early=True)
        if calibrated:
            break
        in_one_call = timer.batches_repeats and s.cooldown <= 0
        if in_one_call and s.awaits_trust(readings):
            # a reading long enough to stop at the bound, before the repeats' single call
            number, reading = timer.probe(s.next_number(readings[-1], number, s.trusted_ms))
            readings, counted = [reading], timer.probe_counts
            continue
        number = s.next_number(readings[-1], number)
        batch = s.repeat if in_one_call else 1
        number, readings = timer.repeats(number, batch)
        counted = True
    times = list(readings) if counted else []
    while len(times) < s.repeat:
        if times and s.cooldown > 0:
            sleep(s.cooldown)
        count = 1 if s.cooldown > 0 else s.repeat - len(times)
        number, more = timer.repeats(number, count)
        times += more
        if len(times) < s.repeat and s.shows_slower(times, number):
            return Timing(_per_run(times, number), stopped_early=True)
    return Timing(_per_run(times[: s.repeat], number))
