"""The sidecar of a multi-task record log: `LOG.tasks.json` names each task and its weight.

Records stay as they are (one task per record, no weights); the task scheduler writes this
file beside the log so that `autosched curve` can weight the estimated end-to-end latency.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence


def task_list_path(log: str) -> str:
    """Where the task list of `log` lives: the log's name plus `.tasks.json`."""
    return f"{log}.tasks.json"


def write_task_list(log: str, tasks: Sequence, weights: Sequence[float]) -> str:
    """Write [{key, name, weight}] per task beside `log`; returns the file's path."""
    entries = [
        {"key": t.workload_key, "name": getattr(t, "desc", t.workload_key), "weight": float(w)}
        for t, w in zip(tasks, weights, strict=True)
    ]
    path = task_list_path(log)
    with open(path, "w") as f:
        json.dump({"tasks": entries}, f, indent=1)
        f.write("\n")
    return path


def read_task_list(log: str) -> list[dict]:
    """The [{key, name, weight}] written beside `log`, or [] when there is none."""
    path = task_list_path(log)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(json.load(f).get("tasks", []))
