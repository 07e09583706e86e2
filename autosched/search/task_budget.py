"""How much a model's tuning may still spend: a trial count, a wall-clock deadline, or both, and
how large the warm-up rounds are so that every task gets measured trials within it.

The task scheduler first gives every task one warm-up round, then the gradient strategy's
rounds. With many tasks and a small budget, full-size warm-up rounds would spend the budget on
the first tasks and leave the rest untuned; `warm_up_size` shrinks the round so that the warm-up
takes about half of what is left, never more than all of it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autosched.errors import OptionError


@dataclass(frozen=True)
class WarmUpParams:
    """The size of a warm-up round: at most `num_measures_per_round`, at least `min_trials`
    (when the budget allows), a multiple of `granularity` (the measurer's batch unit), and
    about `share` of the budget left spread over the tasks not warmed up yet."""

    min_trials: int = 8
    granularity: int = 8
    share: float = 0.5


def warm_up_size(
    budget_left: float, cold_tasks: int, per_round: int, params: WarmUpParams | None = None
) -> int:
    """Trials of one warm-up round when `cold_tasks` tasks (this one included) still wait for
    theirs and about `budget_left` trials remain (inf: unknown). Every cold task fits in the
    budget: below `min_trials` x tasks the budget is split evenly (at least one trial each)."""
    p = params or WarmUpParams()
    cold = max(1, cold_tasks)
    if not math.isfinite(budget_left):
        return min(per_round, max(p.min_trials, p.granularity))
    left = max(0, int(budget_left))
    size = min(per_round, max(p.min_trials, int(left * p.share) // cold))
    if size >= p.granularity:
        size -= size % p.granularity
    if size * cold > left:  # too small a budget for min_trials each: split it evenly
        size = left // cold
    return max(1, min(size, left)) if left else 0


@dataclass
class Budget:
    """What one `TaskScheduler.tune` call may spend: `trials` (measured in all, those of a
    resumed log included; None: no limit) and `seconds` of wall-clock time from its start
    (None: no limit), read from `clock` (injected by tests). `rate` keeps the trials per second
    seen so far, to turn the time left into trials left."""

    trials: int | None
    seconds: float | None
    clock: Callable[[], float] = time.monotonic
    start: float = field(init=False)

    def __post_init__(self) -> None:
        if self.trials is None and self.seconds is None:
            raise OptionError("tuning needs a budget: a number of trials, a time, or both")
        if self.seconds is not None and not self.seconds > 0:
            raise OptionError(f"the time budget must be positive, got {self.seconds} s")
        self.start = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def time_is_up(self) -> bool:
        return self.seconds is not None and self.elapsed() >= self.seconds

    def trials_left(self, used: int) -> float:
        """Trials the trial budget still allows once `used` are counted (rounds in flight
        included); inf without a trial budget."""
        return math.inf if self.trials is None else float(max(0, self.trials - used))

    def can_start_round(self, used: int) -> bool:
        """Whether another round may start: time left and at least one trial left."""
        return not self.time_is_up() and self.trials_left(used) >= 1

    def expected_trials_left(self, used: int, measured_now: int) -> float:
        """What the warm-up is sized by: the trials left, and under a time budget no more than
        the time left allows at the rate of the `measured_now` trials measured since the start
        (no limit from time before any was measured)."""
        left = self.trials_left(used)
        if self.seconds is not None:
            elapsed = self.elapsed()
            if elapsed >= self.seconds:
                return 0.0
            if measured_now > 0 and elapsed > 0:
                left = min(left, (self.seconds - elapsed) * measured_now / elapsed)
        return left


# The trials per task of a default budget: enough for the warm-up and a few gradient rounds of
# every task (Ansor's guidance is 800-1000 per task for a converged model; this is the budget
# of a first usable result). Bounded below so that a small model is not under-tuned, and above
# so that a model of very many tasks does not run for a day by default.
DEFAULT_TRIALS_PER_TASK = 200
DEFAULT_LEAST_TRIALS = 1000
DEFAULT_MOST_TRIALS = 10_000


def default_trials(n_tasks: int) -> int:
    """The trial budget of a model of `n_tasks` tasks when the user gave neither trials nor
    time: `DEFAULT_TRIALS_PER_TASK` per task, within [`DEFAULT_LEAST_TRIALS`,
    `DEFAULT_MOST_TRIALS`]."""
    return min(DEFAULT_MOST_TRIALS, max(DEFAULT_LEAST_TRIALS, DEFAULT_TRIALS_PER_TASK * n_tasks))
