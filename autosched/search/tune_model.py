"""Tune the tasks of a model: `tune_tasks(tasks, weights, log, total_trials)` tunes them all
into one log, the `TaskScheduler` sharing the trials out and a `PolicyTuner` per task running the
ordinary tuning loop (`auto_schedule.run_trials`) a few rounds at a time.

What the CLI calls for a model: one SketchPolicy and one measurer per task, ONE cost model for
all (features are task-independent, so each task's measurements help rank the others') and ONE
record log. An existing log is resumed as `autosched resume` does: the model is trained on it
first, each task's policy is preloaded with its records, and each tuner starts from the
best-so-far curve of its task's logged trials.

All tasks measure through ONE context (`measure_context`, e.g. a `DaskMeasureContext`, else a
local one over `devices`, default every GPU of this host). By default two tasks per GPU and five
more are tuned at once (`parallel_tasks`, `default_parallel_tasks`), each round in its own
thread: while the GPUs measure the batches of some tasks, the next tasks' batches are searched
and built, so the GPUs do not wait for the search. They share one cost model, retrained in a
thread of its own (`shared_measure.TrainedInBackground`), so no round waits for another's
training.

The budget is a trial count, a wall-clock time (`time_budget_s`), or both; the warm-up gives
every task measured trials within it. `fallback_costs` (seconds per task: its subgraph's time
in PyTorch, `pytorch_times.subgraph_times`) stand in for a task without a kernel, so the
estimated latency is finite from the start.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, cast

from autosched.errors import OptionError
from autosched.records import load_records
from autosched.search.auto_schedule import BestSoFar, TuningOptions, run_trials
from autosched.search.program_measurer import EARLY_STOP_FACTOR
from autosched.search.protocols import MeasureCallback, Measurer, SearchPolicy
from autosched.search.task_scheduler import SchedulerParams, SchedulerResult, TaskScheduler

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State
    from autosched.search.params import SearchParams
    from autosched.task.search_task import SearchTask
    from costmodel import CostModel
    from measure import LocalBuilder, LocalRunner, MeasureContext, RunnerPool

# Makes a task's measurer: measurer_factory(task, callbacks) (tests pass a simulated one).
MeasurerFactory = Callable[["SearchTask", Sequence[MeasureCallback]], Measurer]


def logged_curve(path: str, workload_key: str) -> list[float]:
    """The best mean cost so far after each of a task's records in a log, in log order (inf
    until a correct one); empty for a missing log."""
    if not os.path.exists(path):
        return []
    curve, best = [], math.inf
    for inp, res in load_records(path):
        if inp.workload_key == workload_key:
            best = min(best, res.mean_cost if res.ok else math.inf)
            curve.append(best)
    return curve


class PolicyTuner:
    """Tunes one task a few rounds at a time with `policy`. `make_measurer()` is called on the
    first `tune` (a task never picked never starts a measuring context); `curve` holds the
    best-so-far of the task's trials already in the log, for the scheduler to resume from."""

    def __init__(
        self,
        task: SearchTask,
        policy: SearchPolicy,
        make_measurer: Callable[[], Measurer],
        curve: list[float] | None = None,
        verbose: int = 0,
    ) -> None:
        self.task = task
        self.policy = policy
        self.make_measurer = make_measurer
        self.measurer: Measurer | None = None
        self.curve = list(curve or [])
        self.verbose = verbose
        self.found = BestSoFar()
        start = policy.best_state()
        if start is not None:
            self.found.offer(start[0], start[1], 0)
        self.round = 0

    @property
    def best_cost(self) -> float:
        return self.found.cost

    def tune(self, n: int) -> tuple[int, float]:
        """Measure n more states of the task; returns (states measured, best cost so far).
        Fewer than n (0) measured means its search space is exhausted."""
        if self.measurer is None:
            self.measurer = self.make_measurer()
        opts = TuningOptions(num_measure_trials=n, num_measures_per_round=n, verbose=self.verbose)
        history = run_trials(self.task, self.policy, self.measurer, opts, self.found, self.round)
        self.round += len(history)
        return (history[-1]["trials"] if history else 0), self.found.cost

    def best(self) -> tuple[float, State] | None:
        """(cost, State) of the best correct state found or preloaded, or None."""
        if self.found.state is None:
            return None
        return self.found.cost, self.found.state

    def close(self) -> None:
        """Close the measurer (its build and run processes), if one was made."""
        if self.measurer is not None:
            self.measurer.close()


# tasks tuned at once by default: per GPU, and more whatever the GPU count
TASKS_PER_GPU = 2
EXTRA_TASKS = 5


def default_parallel_tasks(gpus: int) -> int:
    """How many tasks `tune_tasks` tunes at once on `gpus` GPUs by default: `TASKS_PER_GPU` a GPU
    and `EXTRA_TASKS` more. A task round spends most of its time searching and compiling, a
    fifth or less on the GPU, and a round of few candidates waits for its slowest compile: the
    rounds a GPU needs to stay busy are not enough to keep the host's compilers and search
    workers busy too, which the extra rounds do."""
    return TASKS_PER_GPU * max(1, gpus) + EXTRA_TASKS


def tune_tasks(
    tasks: Sequence[SearchTask],
    weights: Sequence[float] | None,
    log: str,
    total_trials: int | None = None,
    *,
    time_budget_s: float | None = None,
    fallback_costs: Sequence[float] | None = None,
    num_measures_per_round: int = 64,
    strategy: str = "gradient",
    search_params: SearchParams | None = None,
    scheduler_params: SchedulerParams | None = None,
    cost_model: CostModel | None = None,
    builder: LocalBuilder | None = None,
    runner: LocalRunner | RunnerPool | None = None,
    measurer_factory: MeasurerFactory | None = None,
    objective: Callable | None = None,
    n_jobs: int | None = None,
    verbose: int = 1,
    devices: Sequence[int] | None = None,
    measure_context: MeasureContext | None = None,
    parallel_tasks: int | None = None,
    early_stop_factor: float | None = EARLY_STOP_FACTOR,
) -> SchedulerResult:
    """Tune `tasks` (weighted by how often the model runs each; default 1) for `total_trials`
    trials in all, those already in `log` included, and/or `time_budget_s` seconds (no round
    starts after it), appending to `log`. `fallback_costs[i]`: seconds task i costs while it has
    no kernel (PyTorch's time), for the estimate. `measurer_factory(task, callbacks)` replaces
    the GPU measurer (tests pass a simulated one); `parallel_tasks` (default: 1 with a factory,
    else `default_parallel_tasks`) tasks are tuned at once. `early_stop_factor`: as
    `ProgramMeasurer`'s. Returns the scheduler's result: best
    cost and State per task, the estimated end-to-end latency, the tasks left to PyTorch and
    the trials per second. Ctrl-C ends it early with the result so far; calling it again on the
    same log goes on from there."""
    from autosched.checks import integer, optional_integer
    from autosched.records import RecordToFile
    from autosched.search.cost_model import default_cost_model, train_on_log
    from autosched.search.policy import PreloadMeasuredStates, SearchParams, SketchPolicy
    from autosched.search.program_measurer import ProgramMeasurer
    from autosched.search.shared_measure import TrainedInBackground
    from autosched.search.task_list import write_task_list
    from autosched.search.workers import resolve_n_jobs
    from measure import LocalMeasureContext

    optional_integer("total_trials", total_trials, 0)
    integer("num_measures_per_round", num_measures_per_round, 1)
    if total_trials is None and time_budget_s is None:
        raise OptionError("tune_tasks needs total_trials, time_budget_s or both")
    if time_budget_s is not None and not time_budget_s > 0:
        raise OptionError(f"time_budget_s must be positive seconds, got {time_budget_s!r}")
    weights = [1.0] * len(tasks) if weights is None else list(weights)
    if len(weights) != len(tasks):
        raise OptionError(
            f"tune_tasks got {len(tasks)} tasks and {len(weights)} weights: give one weight per "
            "task (or weights=None for 1 each)"
        )
    params = search_params or SearchParams()
    model: CostModel = cost_model or default_cost_model(params.seed, params.pretrained)
    resuming = os.path.exists(log)
    if resuming:
        n = train_on_log(model, log, n_jobs=resolve_n_jobs(n_jobs))
        if verbose:
            print(f"resuming from {log}: cost model trained on {n} records")
    write_task_list(log, tasks, weights)
    record: MeasureCallback = RecordToFile(log)
    context: MeasureContext | None = None
    if measurer_factory is None:
        context = measure_context or LocalMeasureContext(builder, runner, devices=devices)
        parallel = parallel_tasks or default_parallel_tasks(context.gpu_count())
    else:
        parallel = parallel_tasks or 1
    parallel = max(1, min(parallel, len(tasks)))
    shared: TrainedInBackground | None = None
    if parallel > 1:  # shared by the threads of tasks tuned at once
        shared = TrainedInBackground(model)
        model = cast("CostModel", shared)  # the log writer takes calls from threads itself
    if verbose and parallel > 1:
        print(f"tuning {parallel} tasks at once")

    def tuner(task: SearchTask) -> PolicyTuner:
        callbacks = [PreloadMeasuredStates(log)] if resuming else []
        policy = SketchPolicy(task, model, params, init_search_callbacks=callbacks, verbose=0)
        make: Callable[[], Measurer]
        if measurer_factory is not None:
            make = partial(measurer_factory, task, [record])
        else:
            make = partial(
                ProgramMeasurer,
                task,
                callbacks=[record],
                workers=policy.workers,
                context=context,
                early_stop_factor=early_stop_factor,
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
        fallback_costs=fallback_costs,
    )
    try:
        result = scheduler.tune(total_trials, time_budget_s)
        if verbose:
            print(result.summary([getattr(t, "desc", t.workload_key) for t in tasks]), flush=True)
        return result
    finally:
        for t in tuners:
            t.close()
        if context is not None and measure_context is None:
            context.close()
        if shared is not None:  # the caller's model has learnt from every measurement
            shared.wait()
