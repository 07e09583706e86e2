"""Warm-up round sizes and the trial / time budget of a model's tuning (`task_budget`)."""

from __future__ import annotations

import math

import pytest

from autosched.errors import OptionError
from autosched.search.task_budget import (
    DEFAULT_LEAST_TRIALS,
    DEFAULT_MOST_TRIALS,
    DEFAULT_TRIALS_PER_TASK,
    Budget,
    WarmUpParams,
    default_trials,
    warm_up_size,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("budget", "cold", "size"),
    [
        (10_000, 5, 64),  # a large budget: full rounds
        (1500, 31, 24),  # ResNet-50's 31 tasks in 1500 trials: half the budget, multiples of 8
        (300, 31, 8),  # the smallest warm-up round...
        (200, 31, 6),  # ...unless it does not fit: the budget split evenly
        (20, 31, 1),  # fewer trials than tasks: one each while they last
        (0, 3, 0),
    ],
)
def test_warm_up_size_scales_with_the_budget_and_the_tasks(budget, cold, size):
    assert warm_up_size(budget, cold, 64) == size
    assert size * cold <= budget or size == 1


def test_warm_up_size_without_a_known_budget_is_the_smallest_round():
    assert warm_up_size(math.inf, 31, 64) == 8
    assert warm_up_size(math.inf, 31, 64, WarmUpParams(min_trials=16, granularity=4)) == 16


def test_a_budget_needs_trials_or_time_and_a_positive_time():
    with pytest.raises(OptionError, match="needs a budget"):
        Budget(None, None)
    with pytest.raises(OptionError, match="must be positive"):
        Budget(None, 0.0)


def test_the_time_budget_turns_into_trials_at_the_rate_seen():
    clock = Clock()
    budget = Budget(1000, 100.0, clock)
    assert budget.expected_trials_left(0, 0) == 1000  # no rate yet: the trial budget
    clock.now = 20.0
    assert budget.expected_trials_left(40, 40) == pytest.approx(160)  # 80 s left at 2 trials/s
    assert budget.trials_left(40) == 960 and budget.can_start_round(40)
    clock.now = 100.0
    assert budget.time_is_up() and not budget.can_start_round(40)
    assert budget.expected_trials_left(40, 40) == 0
    assert not Budget(64, None, clock).can_start_round(64)


def test_the_default_budget_grows_with_the_tasks():
    assert default_trials(31) == 31 * DEFAULT_TRIALS_PER_TASK
    assert default_trials(1) == DEFAULT_LEAST_TRIALS
    assert default_trials(1000) == DEFAULT_MOST_TRIALS


def test_tune_tasks_needs_a_budget(tmp_path):
    import autosched
    from autosched.search.tune_model import tune_tasks

    task = autosched.SearchTask("matmul", (8, 8, 8))
    with pytest.raises(OptionError, match="needs total_trials, time_budget_s or both"):
        tune_tasks([task], None, str(tmp_path / "log.json"), None)
    with pytest.raises(OptionError, match="time_budget_s must be positive seconds, got 0"):
        tune_tasks([task], None, str(tmp_path / "log.json"), time_budget_s=0)
