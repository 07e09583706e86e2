"""`PolicyTuner`: the task scheduler's handle on one task, tuned by its own SketchPolicy.

The scheduler asks a tuner for `tune(n) -> (trials measured, best cost so far)`, again and
again; the policy (its measured states, its population seeds) and the measurer live across
those calls, and each call runs the ordinary tuning loop (`auto_schedule.run_trials`) for n
trials. A tuner built on a log that already holds the task's records starts from them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from autosched.records import load_records
from autosched.search.auto_schedule import BestSoFar, TuningOptions, run_trials


def logged_curve(path: str, workload_key: str) -> list[float]:
    """The best mean cost so far after each of a task's records in a log, in log order (inf
    until a correct one); empty for a missing log."""
    if not os.path.exists(path):
        return []
    curve, best = [], math.inf
    for inp, res in load_records(path):
        if inp.workload_key == workload_key:
            best = min(best, res.mean_cost if res.ok else math.inf)
            curve.append(best)
    return curve


class PolicyTuner:
    """Tunes one task a few rounds at a time with `policy`. `make_measurer()` is called on the
    first `tune` (a task never picked never starts a measuring context); `curve` holds the
    best-so-far of the task's trials already in the log, for the scheduler to resume from."""

    def __init__(
        self,
        task,
        policy,
        make_measurer: Callable[[], object],
        curve: list[float] | None = None,
        verbose: int = 0,
    ) -> None:
        self.task = task
        self.policy = policy
        self.make_measurer = make_measurer
        self.measurer = None
        self.curve = list(curve or [])
        self.verbose = verbose
        self.found = BestSoFar()
        start = policy.best_state()
        if start is not None:
            self.found.offer(start[0], start[1], 0)
        self.round = 0

    @property
    def best_cost(self) -> float:
        return self.found.cost

    def tune(self, n: int) -> tuple[int, float]:
        """Measure n more states of the task; returns (states measured, best cost so far).
        Fewer than n (0) measured means its search space is exhausted."""
        if self.measurer is None:
            self.measurer = self.make_measurer()
        opts = TuningOptions(num_measure_trials=n, num_measures_per_round=n, verbose=self.verbose)
        history = run_trials(self.task, self.policy, self.measurer, opts, self.found, self.round)
        self.round += len(history)
        return (history[-1]["trials"] if history else 0), self.found.cost

    def best(self):
        """(cost, State) of the best correct state found or preloaded, or None."""
        if self.found.state is None:
            return None
        return self.found.cost, self.found.state

    def close(self) -> None:
        """Close the measurer's context (its build and run processes), if it has one."""
        close = getattr(self.measurer, "close", None)
        if close is not None:
            close()
