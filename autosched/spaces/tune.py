"""`tune(task, space=fn or "auto")`: tune one task over a stochastic schedule function's space
or over the sketch search's.

Both run the tuning loop of search.auto_schedule, so measurement, the record log and the
returned TuningResult are the same; only the policy that proposes States differs.
"""

from __future__ import annotations

from collections.abc import Callable

from autosched.records import RecordToFile
from autosched.schedule.compute_dag import ComputeDAG
from autosched.search.auto_schedule import TuningOptions, TuningResult, auto_schedule
from autosched.spaces.trace_search import TraceSearchParams, TraceSearchPolicy
from autosched.task.search_task import SearchTask


def tune(
    dag_or_task: ComputeDAG | SearchTask,
    space: Callable | str = "auto",
    num_trials: int = 64,
    log: str | None = None,
    per_round: int = 16,
    params: TraceSearchParams | None = None,
    model=None,
    measurer=None,
    verbose: int = 0,
) -> TuningResult:
    """Tune `dag_or_task` for `num_trials` measurements, `per_round` a round, appending records
    to `log`. `space` is a schedule function `fn(sch)` (searched by TraceSearchPolicy) or
    "auto" (the sketch search). `measurer` replaces the GPU measurer (tests pass a simulated
    one; the log's callback is added to its `callbacks`)."""
    task = dag_or_task if isinstance(dag_or_task, SearchTask) else SearchTask(dag=dag_or_task)
    callbacks = [RecordToFile(log)] if log else []
    if measurer is not None:
        measurer.callbacks.extend(callbacks)
    opts = TuningOptions(
        num_measure_trials=num_trials,
        num_measures_per_round=per_round,
        measure_callbacks=callbacks,
        verbose=verbose,
        measurer=measurer,
    )
    if space == "auto":
        return auto_schedule(task, None, opts)
    if not callable(space):
        raise ValueError(f"space must be a schedule function or 'auto', not {space!r}")
    return auto_schedule(task, TraceSearchPolicy(task, space, params, model), opts)
