"""Tensor expressions serialised to JSON and rebuilt (te.serialize): the same DAG text and the same
numbers on the numpy reference, for every suite workload, a user-defined reducer and constants
JSON cannot hold; malformed data is refused with a TEError."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autosched import te
from autosched.errors import TEError
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.evaluate import evaluate
from autosched.task.search_task import suite_task
from autosched.task.workloads import SUITE
from autosched.te.serialize import dump_tensors, load_tensors
from tests.interpreter_check import random_inputs


def round_trip(tensors) -> ComputeDAG:
    return ComputeDAG(load_tensors(json.loads(json.dumps(dump_tensors(tensors)))))


@pytest.mark.parametrize("name", sorted(SUITE))
def test_suite_dags_round_trip_with_the_same_text_and_values(name):
    dag = suite_task(name, reduced=True).compute_dag
    again = round_trip(dag.tensors)
    assert again.canonical_text() == dag.canonical_text()
    inputs = random_inputs(dag)
    got, want = evaluate(again.tensors, inputs), evaluate(dag.tensors, inputs)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_user_reducer_and_infinite_constants_round_trip():
    x = te.placeholder((4, 6), name="x")
    k = te.reduce_axis((0, 6), name="k")
    absmax = te.comm_reducer(lambda a, b: te.max(te.abs(a), te.abs(b)), lambda dt: 0.0, "absmax")
    y = te.compute((4,), lambda i: absmax(x[i, k], axis=k), name="y")
    z = te.compute((4,), lambda i: te.max(y[i], te.const(float("-inf"), "float32")), name="z")
    dag = ComputeDAG([x, z])
    again = round_trip(dag.tensors)
    assert again.canonical_text() == dag.canonical_text()
    data = np.random.default_rng(1).uniform(-1, 1, (4, 6)).astype("float32")
    np.testing.assert_array_equal(evaluate(again.tensors, {"x": data})["z"], np.abs(data).max(1))


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"version": 99, "ops": []},
        {"version": 1, "ops": [{"op": "compute"}], "args": [0]},
        {"version": 1, "ops": [], "args": [3]},
    ],
)
def test_malformed_data_is_refused_with_one_clear_error(data):
    with pytest.raises(TEError):
        load_tensors(data)
