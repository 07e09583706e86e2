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


def test_runs_table_splits_rounds_and_sorts_runs_by_their_best(tmp_path):
    """A log of eight batch_matmul states (the first four in round one): the first-round share
    and the later share of depths the estimate rejects, and the run's best classed by its own
    depth."""
    from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile
    from autosched.search.workers import TaskContext
    from autosched.task.search_task import suite_task

    task = suite_task("batch_matmul")
    sampler = SketchSampler(generate_sketches(task.compute_dag, task.hardware_params), verify=False)
    context = TaskContext(task.compute_dag)
    records = [as_records(s.key()) for s in sampler.sample(8, random.Random(2))]
    records = [unroll_budget.with_unroll(r, 1024) for r in records]  # often over the estimate
    over = [unroll_budget.over_budget(context, sampler.plans, sampler.ctx, r) for r in records]
    assert True in over and False in over
    costs = [(10 - k) * 1e-6 for k in range(8)]  # the last state is the fastest
    dag = task.compute_dag.serialized()
    inputs = [MeasureInput(task.workload_key, r, dag=dag) for r in records]
    log = str(tmp_path / "batch_matmul.json")
    RecordToFile(log)(inputs, [MeasureRecordResult((c,)) for c in costs])

    row = unroll_budget.runs_table(["batch_matmul"], [log], 8, first_round=4).splitlines()[-1]
    first, later = sum(over[:4]) / 4, sum(over[4:]) / 4
    best = "1, 3.00 | 0, -" if over[-1] else "0, - | 1, 3.00"
    assert row == f"| batch_matmul | 1 | {first:.2f} / {later:.2f} | {best} |"
    assert unroll_budget.runs_table(["batch_matmul"], [log], 9).count("\n") == 2  # no run of 9
