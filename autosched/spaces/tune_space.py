"""`tune_space(task, fn)`: tune one task over a user's stochastic schedule function's space.

It runs the tuning loop of search.auto_schedule with a `TraceSearchPolicy`, so measurement, the
record log and the returned TuningResult are those of the sketch search (whose entry is
`auto_schedule`); the records also carry each state's trace, from which a search resumes.
"""

from __future__ import annotations

from autosched.records import RecordToFile
from autosched.search.auto_schedule import TuningOptions, TuningResult, auto_schedule
from autosched.search.protocols import MeasureCallback, Measurer
from autosched.spaces.stochastic import ScheduleFunction
from autosched.spaces.trace_search import (
    PreloadMeasuredTraces,
    TraceSearchParams,
    TraceSearchPolicy,
    WithTraces,
)
from autosched.task.search_task import SearchTask
from costmodel import CostModel


def tune_space(
    task: SearchTask,
    space: ScheduleFunction,
    num_trials: int = 64,
    log: str | None = None,
    per_round: int = 16,
    params: TraceSearchParams | None = None,
    model: CostModel | None = None,
    measurer: Measurer | None = None,
    verbose: int = 0,
    resume_from: str | None = None,
) -> TuningResult:
    """Tune `task` over the States the schedule function `space(sch)` makes, for `num_trials`
    measurements, `per_round` a round, appending records (each with its trace) to `log`.
    `measurer` replaces the GPU measurer (tests pass a simulated one; the log's callback is
    added to its `callbacks`). `resume_from` (a log of an earlier search, often `log` itself)
    starts from its states: never measured again, the best seed the evolution."""
    if not callable(space):
        raise ValueError(f"space must be a schedule function fn(sch), not {space!r}")
    init = [PreloadMeasuredTraces(resume_from)] if resume_from else []
    policy = TraceSearchPolicy(task, space, params, model, init_search_callbacks=init)
    callbacks: list[MeasureCallback] = [WithTraces(policy, RecordToFile(log))] if log else []
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
