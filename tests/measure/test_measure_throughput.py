"""measure.throughput's bounded run: each candidate bounded by the best so far times F."""

from __future__ import annotations

import pytest

from measure import RunResult
from measure.throughput import run_bounded


class CostRunner:
    """Candidates "cost" their artifact's value; records each run's cost bound."""

    def __init__(self) -> None:
        self.bounds: list = []

    def run(self, artifacts, builds, references, cost_bound=None):
        self.bounds += [cost_bound] * len(artifacts)
        return [RunResult((float(a),)) for a in artifacts]


@pytest.mark.parametrize("factor", [2.0, None])
def test_each_candidate_is_bounded_by_the_best_before_it(factor):
    runner = CostRunner()
    runs = run_bounded(runner, [3, 1, 4, 0.5], [None] * 4, {}, factor)
    assert [r.mean_cost for r in runs] == [3, 1, 4, 0.5]
    assert runner.bounds == ([None, 6.0, 2.0, 2.0] if factor else [None] * 4)
