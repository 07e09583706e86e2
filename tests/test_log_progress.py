"""benchmarks/log_progress.py's summary of how a log's rounds spread over launch shapes: the
figures come from the logged states themselves, so a log of one shape repeated and a log of
distinct shapes read differently."""

from __future__ import annotations

import collections
import math
import os
import sys

from test_search import SMALL, make_policy, small_task

from autosched.features.extract import state_features
from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile
from autosched.search.policy import launch_shape

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import log_progress  # noqa: E402


def sampled_inputs(count: int) -> list[MeasureInput]:
    task = small_task()
    policy = make_policy(task, SMALL)
    states = [policy.workers.context.replay(r) for r in policy.sample_fresh(count)]
    dag = task.compute_dag.serialized()
    return [MeasureInput(task.workload_key, s.key(), dag=dag) for s in states]


def test_shapes_per_round_counts_each_rounds_distinct_launch_shapes(tmp_path):
    inputs = sampled_inputs(12)
    shapes = [launch_shape(state_features(inp.state)) for inp in inputs]
    assert len(set(shapes)) >= 3  # the sample spans several tilings
    # round 1: the twelve states; round 2: the first state six times
    log = str(tmp_path / "log.json")
    result = MeasureRecordResult((1e-5,))
    RecordToFile(log)(inputs + [inputs[0]] * 6, [result] * 18)
    rounds = log_progress.shapes_per_round(log, batch=12)
    most = max(collections.Counter(shapes).values())
    assert rounds == [(len(set(shapes)), most), (1, 6)]
    table = log_progress.shapes_table([log], os.path.basename, batch=12)
    assert f"| log.json | {len(set(shapes))}/{most} 1/6 |" in table


def test_launch_threads_inverts_the_feature_scaling():
    shape = tuple(math.log2(1 + x) for x in (392, 1, 1, 128, 1, 1)) + (1.0, 13.0, 6.0)
    assert log_progress.launch_threads(shape) == 392 * 128
    assert log_progress.launch_threads(()) == 0


def test_threads_table_splits_first_round_later_trials_and_runs_bests():
    # (trial, log2 threads, µs or None, run): run 0's best launches 2^14, run 1's 2^15
    rows = [
        (0, 10, 9.0, 0),
        (1, 14, 3.0, 0),
        (64, 14, 2.5, 0),
        (0, 10, None, 1),
        (1, 10, 8.0, 1),
        (70, 15, 2.8, 1),
    ]
    table = log_progress.threads_table(rows, first_round=64)
    assert "(2 runs)" in table
    assert "| 2^10 | 0.75 | 0.00 | 0 | 8.00 |" in table
    assert "| 2^14 | 0.25 | 0.50 | 1 | 2.50 |" in table
    assert "| 2^15 | 0.00 | 0.50 | 1 | 2.80 |" in table


def test_threads_rows_reads_each_logged_state_launch(tmp_path):
    inputs = sampled_inputs(8)
    log = str(tmp_path / "log.json")
    RecordToFile(log)(inputs, [MeasureRecordResult((1e-5,))] * 8)
    rows = log_progress.threads_rows([log])
    assert list(rows) == [inputs[0].workload_key]
    expected = [
        round(math.log2(log_progress.launch_threads(launch_shape(state_features(i.state)))))
        for i in inputs
    ]
    assert [r[1] for r in rows[inputs[0].workload_key]] == expected
    assert {r[2] for r in rows[inputs[0].workload_key]} == {10.0}


def test_block_shape_reads_the_thread_level_of_four_way_spatial_splits():
    steps = [
        ("CI", 5),
        ("SP", 3, 0, 1, (1, 1, 1, 1), True),
        ("SP", 3, 5, 512, (1, 2, 1, 2), True),
        ("SP", 3, 10, 7, (1, 7, 1, 1), True),
        ("SP", 3, 20, 512, (16, 4), True),  # a reduction split: not a block axis
        ("SP", 6, 0, 64, (4,), True),  # a fetch's vector split
    ]
    assert log_progress.block_shape(steps) == "1x2x7"
    assert log_progress.block_shape([("CI", 5)]) == ""


def test_blocks_table_puts_fastest_shapes_first_and_folds_the_rare_ones():
    # run 0 ends in 1x2x7x7, run 1 in 1x16x1x7; 1x8x1x1 is rare and holds no run's best
    rows = [(i, "1x16x1x7", 60.0 + i, 1) for i in range(60)]
    rows += [(0, "1x2x7x7", 140.0, 0), (1, "1x8x1x1", 300.0, 0), (70, "1x2x7x7", 46.0, 0)]
    rows += [(0, "1x2x7x7", None, 1)]
    table = log_progress.blocks_table(rows, first_round=64, min_share=0.05)
    body = table.splitlines()[2:]
    assert body[0] == "| 1x2x7x7 | 0.03 | 1.00 | 1 | 46.00 |"
    assert body[1] == "| 1x16x1x7 | 0.95 | 0.00 | 1 | 60.00 |"
    assert body[2] == "| 1 others | 0.02 | 0.00 | 0 | - |"
    assert len(body) == 3


def test_block_rows_reads_each_logged_state(tmp_path):
    inputs = sampled_inputs(8)
    log = str(tmp_path / "log.json")
    RecordToFile(log)(inputs, [MeasureRecordResult((2e-5,))] * 8)
    rows = log_progress.block_rows([log])
    expected = [log_progress.block_shape(i.steps) for i in inputs]
    assert all(expected)
    assert [r[1] for r in rows[inputs[0].workload_key]] == expected
    assert {r[2] for r in rows[inputs[0].workload_key]} == {20.0}
