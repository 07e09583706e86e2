"""What `autosched curve` adds for a log of several tasks (a model tuned by the task scheduler):
the estimated end-to-end latency over trials (sum over tasks of weight x best so far) and the
trials each task received.

Weights come from the log's sidecar `LOG.tasks.json` (written by the task scheduler), then from
`--weights TASK=W` (TASK: a workload key, a task name from the sidecar, or a task's index in
the sidecar's order, else in the order of first appearance in the log); 1 otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from autosched.errors import AutoschedError


def task_order(records: Sequence, listed: Sequence[dict]) -> list[str]:
    """The workload keys of the model: the sidecar's, then any other in order of appearance."""
    keys = [e["key"] for e in listed]
    for inp, _ in records:
        if inp.workload_key not in keys:
            keys.append(inp.workload_key)
    return keys


def resolve_weights(keys: list[str], listed: Sequence[dict], specs: Iterable[str]) -> dict:
    """Per workload key its weight: 1, the sidecar's, then each `TASK=W` spec."""
    weights = {k: 1.0 for k in keys}
    names = {}
    for e in listed:
        weights[e["key"]] = float(e.get("weight", 1.0))
        names[e.get("name", e["key"])] = e["key"]
    for spec in specs:
        task, sep, value = spec.rpartition("=")
        if not sep:
            raise AutoschedError(f"--weights expects TASK=WEIGHT, got {spec!r}")
        key = _task_key(task, keys, names)
        try:
            weights[key] = float(value)
        except ValueError:
            raise AutoschedError(f"--weights {spec!r}: {value!r} is not a number") from None
    return weights


def _task_key(task: str, keys: list[str], names: dict) -> str:
    if task in keys:
        return task
    if task in names:
        return names[task]
    if task.isdigit() and int(task) < len(keys):
        return keys[int(task)]
    raise AutoschedError(
        f"--weights: no task {task!r} in the log (give a workload key, a name or an index "
        f"0..{len(keys) - 1})"
    )


def end_to_end_curve(records: Sequence, weights: dict) -> tuple[list[int], list[float]]:
    """(trial numbers, sum of weight x best latency so far in µs) over the log, from the first
    trial after which every task has a correct measurement."""
    best = {k: math.inf for k in weights}
    xs, ys = [], []
    for trial, (inp, res) in enumerate(records, start=1):
        key = inp.workload_key
        if res.ok:
            best[key] = min(best[key], res.mean_cost)
        total = sum(w * best[k] for k, w in weights.items())
        if math.isfinite(total):
            xs.append(trial)
            ys.append(total * 1e6)
    return xs, ys


def trials_per_task(records: Sequence, keys: list[str]) -> list[int]:
    """How many records each task has, in the order of `keys`."""
    counts = dict.fromkeys(keys, 0)
    for inp, _ in records:
        counts[inp.workload_key] += 1
    return [counts[k] for k in keys]


def draw_model_panels(axes, records: Sequence, listed: Sequence[dict], specs: Iterable[str]):
    """Draw the end-to-end latency curve on axes[0] and the trials per task on axes[1]."""
    keys = task_order(records, listed)
    weights = resolve_weights(keys, listed, specs)
    names = {e["key"]: e.get("name", e["key"]) for e in listed}
    xs, ys = end_to_end_curve(records, weights)
    ax = axes[0]
    ax.plot(xs, ys, drawstyle="steps-post")
    ax.set_xlabel("trials (all tasks)")
    ax.set_ylabel("est. end-to-end µs (Σ weight × best)")
    if not xs:
        ax.text(
            0.5, 0.5, "some task has no correct kernel yet", ha="center", transform=ax.transAxes
        )
    ax.grid(alpha=0.3)
    ax = axes[1]
    labels = [f"{i}: {names.get(k, k)}" for i, k in enumerate(keys)]
    ax.bar(range(len(keys)), trials_per_task(records, keys))
    ax.set_xticks(range(len(keys)), labels, rotation=45, ha="right", fontsize=6)
    ax.set_ylabel("trials")
    ax.grid(alpha=0.3, axis="y")
