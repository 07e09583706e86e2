"""States recorded by searches (tests/data/records/*.json: one record line each, its task's
serialised DAG included), rebuilt for tests: the DAG at its recorded size or at another batch,
and the state its steps replay to.

A record's split steps keep the extents they were made at, but a split applies only its inner
lengths, so the same steps replay on the DAG at a smaller batch (its outermost loops shorter):
the interpreter runs that one in a second, the GPU tests run the recorded size.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State
from autosched.task.search_task import SearchTask

RECORDS = Path(__file__).parent / "data" / "records"


def load_record(name: str) -> dict:
    """The record line of tests/data/records/NAME.json, decoded."""
    return json.loads((RECORDS / f"{name}.json").read_text())


def recorded_task(name: str, batch: int | None = None) -> tuple[SearchTask, State]:
    """The task of record `name` (its TF32 option from its key) and the state of its steps;
    with `batch`, the DAG's leading (batch) dimension set to it on every tensor whose shape
    starts with the recorded batch, and on every compute's first axis of that extent."""
    record = load_record(name)
    dag_json, key = record["task"]["dag"], record["task"]["workload_key"]
    if batch is not None:
        dag_json, key = _at_batch(dag_json, batch), f"{key}-batch{batch}"
    dag = ComputeDAG.from_serialized(dag_json, key)
    task = SearchTask(dag=dag)
    return task, task.compute_dag.replay_steps(record["steps"])


def _at_batch(dag_json: dict, batch: int) -> dict:
    out = copy.deepcopy(dag_json)
    recorded = next(op["shape"][0] for op in out["ops"] if op["op"] == "placeholder")
    for op in out["ops"]:
        if op.get("shape") and op["shape"][0] == recorded:
            op["shape"][0] = batch
        if op.get("axis") and op["axis"][0][1] == recorded:
            op["axis"][0][1] = batch
    return out


__all__ = ["load_record", "recorded_task"]
