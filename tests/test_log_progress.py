"""benchmarks/log_progress.py's summary of how a log's rounds spread over launch shapes: the
figures come from the logged states themselves, so a log of one shape repeated and a log of
distinct shapes read differently."""

from __future__ import annotations

import collections
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
