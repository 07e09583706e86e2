"""benchmarks/unroll_budget.py's pieces that need no compiler: the plan a sampled state came
from, the records at another unroll depth, and the summary's counts."""

from __future__ import annotations

import os
import random
import sys

from workloads_for_tests import suite_dag

from autosched.search.policy import as_records
from autosched.sketch import SketchSampler, generate_sketches

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import unroll_budget  # noqa: E402


def test_plan_of_finds_the_sketch_each_sampled_state_was_drawn_from():
    """dense_bias has three sketches of 3, 5 and 12 steps (so one's head could pass for
    another's); every sampled state maps back to its own."""
    sampler = SketchSampler(generate_sketches(suite_dag("dense_bias")), verify=False)
    states = sampler.sample(24, random.Random(0))
    assert len({sampler.sketch_of[s.key()] for s in states}) > 1
    for s in states:
        assert unroll_budget.plan_of(s, sampler.plans) is sampler.plans[sampler.sketch_of[s.key()]]


def test_with_unroll_sets_only_the_auto_unroll_pragmas():
    sampler = SketchSampler(generate_sketches(suite_dag("batch_matmul")), verify=False)
    (state,) = sampler.sample(1, random.Random(1))
    records = as_records(state.key())
    changed = unroll_budget.with_unroll(records, 1024)
    diff = [(a, b) for a, b in zip(records, changed, strict=True) if a != b]
    assert all(a[0] == "PR" and b[-1] == "auto_unroll_max_step$1024" for a, b in diff)
    assert [r for r in changed if r[0] == "PR"] and all(
        r[-1] == "auto_unroll_max_step$1024" for r in changed if r[0] == "PR"
    )


def test_summary_counts_verdicts_against_spills():
    def row(origin, depth, own, estimate, spill):
        return {
            "workload": "w",
            "origin": origin,
            "depth": depth,
            "own_depth": own,
            "estimate": estimate,
            "budget": 100,
            "spill_bytes": spill,
            "error": "NO_ERROR",
        }

    rows = [
        row("fresh", 0, 0, 50, 0),  # admitted, clean
        row("fresh", 512, 0, 150, 8),  # rejected, spills
        row("fresh", 1024, 0, 150, 0),  # rejected, clean
        row("fastest logged", 1024, 1024, 150, 0),  # its own depth, rejected, clean
        row("fastest logged", 0, 1024, 50, 0),  # another depth: not counted
        row("fastest logged", 64, 64, 80, 0),  # its own depth, admitted
    ]
    line = unroll_budget.summary(rows).splitlines()[-1]
    assert line == "| w | 1 / 1 | 0 / 1 | 1 (1) / 2 |"
