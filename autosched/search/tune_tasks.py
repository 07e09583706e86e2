"""`tune_tasks(tasks, weights, log, total_trials)`: tune a whole model's tasks into one log.

What the CLI calls for a model: one SketchPolicy and one measurer per task, ONE cost model for
all (features are task-independent, so each task's measurements help rank the others') and ONE
record log, shared out by a TaskScheduler. An existing log is resumed as `autosched resume`
does: the model is trained on it first, and each task's policy is preloaded with its records.

All tasks measure through ONE context (`measure_context`, e.g. a `DaskMeasureContext`, else a
local one over `devices`, default every GPU of this host). With several GPUs, as many tasks as
GPUs are tuned at once (`parallel_tasks`), each round of each in its own thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial

from autosched.errors import OptionError
from autosched.search.task_scheduler import SchedulerParams, SchedulerResult, TaskScheduler
from autosched.search.task_tuner import PolicyTuner, logged_curve


def tune_tasks(
    tasks: Sequence,
    weights: Sequence[float] | None,
    log: str,
    total_trials: int,
    *,
    num_measures_per_round: int = 64,
    strategy: str = "gradient",
    search_params=None,
    scheduler_params: SchedulerParams | None = None,
    cost_model=None,
    builder=None,
    runner=None,
    measurer_factory: Callable | None = None,
    objective: Callable | None = None,
    n_jobs: int | None = None,
    verbose: int = 1,
    devices: Sequence[int] | None = None,
    measure_context=None,
    parallel_tasks: int | None = None,
) -> SchedulerResult:
    """Tune `tasks` (weighted by how often the model runs each; default 1) for `total_trials`
    trials in all, those already in `log` included, appending to `log`. `measurer_factory(task,
    callbacks)` replaces the GPU measurer (tests pass a simulated one); `parallel_tasks` (default:
    1 with a factory, else one task per GPU) tasks are tuned at once. Returns the scheduler's
    result: best cost and State per task and the estimated end-to-end latency. Ctrl-C ends it
    early with the result so far; calling it again on the same log goes on from there."""
    from autosched.checks import integer
    from autosched.records import RecordToFile
    from autosched.search.cost_model import XGBModel
    from autosched.search.policy import PreloadMeasuredStates, SearchParams, SketchPolicy
    from autosched.search.program_measurer import ProgramMeasurer
    from autosched.search.shared_measure import Locked, gpu_count
    from autosched.search.task_list import write_task_list
    from autosched.search.workers import resolve_n_jobs
    from measure import LocalMeasureContext

    integer("total_trials", total_trials, 0)
    integer("num_measures_per_round", num_measures_per_round, 1)
    weights = [1.0] * len(tasks) if weights is None else list(weights)
    if len(weights) != len(tasks):
        raise OptionError(
            f"tune_tasks got {len(tasks)} tasks and {len(weights)} weights: give one weight per "
            "task (or weights=None for 1 each)"
        )
    params = search_params or SearchParams()
    model = cost_model or XGBModel(seed=params.seed, nthread=1)
    resuming = os.path.exists(log)
    if resuming:
        n = model.update_from_file(log, n_jobs=resolve_n_jobs(n_jobs))
        if verbose:
            print(f"resuming from {log}: cost model trained on {n} records")
    write_task_list(log, tasks, weights)
    record = RecordToFile(log)
    context = None
    if measurer_factory is None:
        context = measure_context or LocalMeasureContext(builder, runner, devices=devices)
        parallel = parallel_tasks or gpu_count(context)
    else:
        parallel = parallel_tasks or 1
    parallel = max(1, min(parallel, len(tasks)))
    if parallel > 1:  # shared by the threads of tasks tuned at once
        model, record = Locked(model), Locked(record)
    if verbose and parallel > 1:
        print(f"tuning {parallel} tasks at once")

    def tuner(task) -> PolicyTuner:
        callbacks = [PreloadMeasuredStates(log)] if resuming else []
        policy = SketchPolicy(task, model, params, init_search_callbacks=callbacks, verbose=0)
        if measurer_factory is not None:
            make = partial(measurer_factory, task, [record])
        else:
            make = partial(
                ProgramMeasurer, task, callbacks=[record], workers=policy.workers, context=context
            )
        curve = logged_curve(log, task.workload_key) if resuming else []
        return PolicyTuner(task, policy, make, curve, verbose=max(0, verbose - 1))

    tuners = [tuner(t) for t in tasks]
    scheduler = TaskScheduler(
        tasks,
        weights,
        tuners,
        objective=objective,
        strategy=strategy,
        num_measures_per_round=num_measures_per_round,
        params=scheduler_params,
        verbose=verbose,
        parallel=parallel,
    )
    try:
        return scheduler.tune(total_trials)
    finally:
        for t in tuners:
            t.close()
        if context is not None and measure_context is None:
            context.close()
