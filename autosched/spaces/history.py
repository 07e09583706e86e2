"""The best config of a template task in a record log (AutoTVM's `apply_history_best`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autosched.errors import AutoschedError
from autosched.records import MeasureInput, MeasureRecordResult, load_best


@dataclass
class HistoryBest:
    """The fastest correct record of a task: its input, result, config and State. Also a
    context manager (`with apply_history_best(log, task) as best:`), for AutoTVM's shape."""

    input: MeasureInput
    result: MeasureRecordResult
    config: Any  # a ConfigEntity when the task was given, else the record's config dict
    state: Any

    @property
    def cost(self) -> float:
        return self.result.mean_cost

    def __enter__(self) -> HistoryBest:
        return self

    def __exit__(self, *exc) -> None:
        return None


def apply_history_best(log: str, task=None) -> HistoryBest:
    """The best record of `task` (a TemplateTask; any template record when None) in `log`.

    With a task, the config is its ConfigEntity and the State is re-made from the template;
    without one, both come from the record (the config dict, the steps replayed on its DAG).
    """
    key = None if task is None else task.workload_key
    best = load_best(log, key, where=lambda inp: inp.config is not None)
    if best is None:
        raise AutoschedError(f"{log} has no correct record of a template task ({key or 'any'})")
    inp, res = best
    if task is None:
        return HistoryBest(inp, res, inp.config, inp.state)
    config = task.config(inp.config)
    return HistoryBest(inp, res, config, task.instantiate(config))
