"""benchmarks/search_quality.py without a GPU: the proxy measurer's cost is the simulated cost
of the lowered program, and a run reports one row per round with the candidates it lowered."""

from __future__ import annotations

import math

import autosched
from autosched.search.params import SearchParams
from benchmarks import search_quality
from tests.sim_measurer import simulated_cost

TASK = autosched.SearchTask("matmul", (32, 32, 16))


def test_the_proxy_cost_is_the_simulated_cost_of_the_lowered_program():
    from autosched.lower.lowering import lower
    from autosched.sketch import generate_sketches, sample_initial_population

    (state,) = sample_initial_population(generate_sketches(TASK.compute_dag), 1, 0)
    (result,) = search_quality.ProxyMeasurer().measure([state])
    assert result.ok and result.costs[0] == simulated_cost(lower(state))


def test_a_run_reports_each_round_with_the_candidates_it_lowered():
    params = SearchParams(population=8, generations=1, sample_init_min_population=4, n_jobs=1)
    rows = search_quality.run_one(TASK, params, rounds=2, per_round=4)
    assert len(rows) == 2
    assert all(math.isfinite(r["best_us"]) and r["lowered"] > 0 for r in rows)
    assert rows[1]["best_us"] <= rows[0]["best_us"]  # the best so far never gets worse
