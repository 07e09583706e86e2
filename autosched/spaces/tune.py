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
from autosched.spaces.trace_search import (
    PreloadMeasuredTraces,
    TraceSearchParams,
    TraceSearchPolicy,
    WithTraces,
)
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
    resume_from: str | None = None,
) -> TuningResult:
    """Tune `dag_or_task` for `num_trials` measurements, `per_round` a round, appending records
    to `log`. `space` is a schedule function `fn(sch)` (searched by TraceSearchPolicy) or
    "auto" (the sketch search). `measurer` replaces the GPU measurer (tests pass a simulated
    one; the log's callback is added to its `callbacks`). With a schedule function, records
    carry each state's trace, and `resume_from` (a log of an earlier search, often `log`
    itself) starts from its states: never measured again, the best seed the evolution."""
    task = dag_or_task if isinstance(dag_or_task, SearchTask) else SearchTask(dag=dag_or_task)
    if space != "auto" and not callable(space):
        raise ValueError(f"space must be a schedule function or 'auto', not {space!r}")
    if space == "auto" and resume_from is not None:
        raise ValueError("resume_from is for schedule functions; `autosched resume` resumes auto")
    policy = None
    if space != "auto":
        init = [PreloadMeasuredTraces(resume_from)] if resume_from else []
        policy = TraceSearchPolicy(task, space, params, model, init_search_callbacks=init)
    callbacks = [RecordToFile(log)] if log else []
    if policy is not None:
        callbacks = [WithTraces(policy, cb) for cb in callbacks]
    if measurer is not None:
        measurer.callbacks.extend(callbacks)
    opts = TuningOptions(
        num_measure_trials=num_trials,
        num_measures_per_round=per_round,
        measure_callbacks=callbacks,
        verbose=verbose,
        measurer=measurer,
    )
    return auto_schedule(task, policy, opts)
