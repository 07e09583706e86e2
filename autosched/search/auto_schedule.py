"""`auto_schedule(task, search_policy, tuning_options)`: tune one task, and the tuning loop
(`run_trials`) that every search policy runs in (`protocols.SearchPolicy`).

It unpacks into two values as TVM's does, `state, kernel = auto_schedule(...)`, but they are the
best State and its BuiltKernel, not TVM's schedule and tensors (`autosched.build(state, kernel)`
accepts them where a tutorial calls `tvm.build(sch, args, target)`).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autosched.errors import AutoschedError, OptionError
from autosched.search.background import Background, first_done
from autosched.search.progress import RoundTimes, Span, progress_line, round_record
from autosched.search.protocols import MeasureCallback, Measurer, SearchPolicy

if TYPE_CHECKING:
    from autosched.codegen.build import BuiltKernel
    from autosched.records import MeasureRecordResult
    from autosched.schedule.loop_state import State
    from autosched.task.search_task import SearchTask
    from measure import LocalBuilder, LocalRunner, RunnerPool


@dataclass
class TuningOptions:
    """How much to measure and how (TVM's fields). `builder` / `runner`: a measure.LocalBuilder
    / LocalRunner (such as `LocalRPCMeasureContext(...).runner`), or None or TVM's "local" for
    the defaults. `measure_callbacks(inputs, results)` run after each measured batch."""

    num_measure_trials: int = 64
    num_measures_per_round: int = 64
    early_stopping: int | None = None
    builder: LocalBuilder | str | None = None
    runner: LocalRunner | RunnerPool | str | None = None
    measure_callbacks: Sequence[MeasureCallback] | None = ()
    verbose: int = 1
    measurer: Measurer | None = None  # a custom measurer (tests use a simulated one)
    # search the next batch while this one compiles and runs (see run_trials). Off by default,
    # so that a batch is always chosen by the model of the round before; `autosched tune`
    # turns it on (bests as good within noise at equal trials, in less wall time)
    pipeline: bool = False

    def __post_init__(self) -> None:
        from autosched.checks import boolean, integer, optional_integer

        integer("num_measure_trials", self.num_measure_trials, 0)
        integer("num_measures_per_round", self.num_measures_per_round, 1)
        optional_integer("early_stopping", self.early_stopping, 1)
        boolean("pipeline", self.pipeline)
        for name in ("builder", "runner"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "local":
                raise OptionError(f'TuningOptions: {name} is an object or "local", not {value!r}')


@dataclass
class TuningResult:
    """What auto_schedule returns: the best state, its built kernel, the best mean cost in
    seconds, and the round history (one dict per round: trials, best, trials/s, how busy the
    GPU was and the wall-clock split search / build / GPU / idle; `progress.round_record`).
    Unpacks as `state, kernel = result`."""

    state: State
    kernel: BuiltKernel
    best_cost: float
    history: list[dict] = field(default_factory=list)

    def __iter__(self) -> Iterator[State | BuiltKernel]:  # `state, kernel = auto_schedule(...)`
        return iter((self.state, self.kernel))


@dataclass
class BestSoFar:
    """The fastest state seen so far, its mean cost (seconds) and the round it was found in."""

    cost: float = math.inf
    state: State | None = None
    round: int = 0

    def offer(self, cost: float, state: State, rnd: int) -> None:
        """Keep `state` when it is faster than the best so far."""
        if cost < self.cost:
            self.cost, self.state, self.round = cost, state, rnd


def auto_schedule(
    task: SearchTask,
    search_policy: SearchPolicy | None = None,
    tuning_options: TuningOptions | None = None,
) -> TuningResult:
    """Search for a fast schedule of `task` with `search_policy` (default: a SketchPolicy).
    Returns a TuningResult, which unpacks as `state, kernel` (the best State and its
    BuiltKernel; TVM's returns a schedule and its tensors) and whose history gives each
    round's time split. Raises AutoschedError when no correct kernel was found."""
    from autosched.codegen.build import build
    from autosched.search.policy import SketchPolicy
    from autosched.search.program_measurer import ProgramMeasurer

    opts = tuning_options or TuningOptions()
    policy: SearchPolicy = search_policy or SketchPolicy(task, verbose=opts.verbose)
    # TVM's "local" is the default builder / runner
    builder = None if isinstance(opts.builder, str) else opts.builder
    runner = None if isinstance(opts.runner, str) else opts.runner
    measurer: Measurer = opts.measurer or ProgramMeasurer(
        task,
        builder,
        runner,
        opts.measure_callbacks or (),
        workers=getattr(policy, "workers", None),
    )
    best = BestSoFar()
    start = policy.best_state()
    if start is not None:
        best.offer(start[0], start[1], 0)
    history = run_trials(task, policy, measurer, opts, best)
    done = history[-1]["trials"] if history else 0
    if best.state is None:
        raise AutoschedError(
            f"no correct kernel was found for {task.workload_key} in {done} trials"
        )
    return TuningResult(best.state, build(task.compute_dag, best.state), best.cost, history)


def run_trials(
    task: SearchTask,
    policy: SearchPolicy,
    measurer: Measurer,
    opts: TuningOptions,
    best: BestSoFar,
    start_round: int = 0,
) -> list[dict]:
    """The rounds of the tuning loop: search `opts.num_measures_per_round` states with `policy`,
    measure them with `measurer`, tell the policy and update its model, until
    `opts.num_measure_trials` were measured, the space is exhausted or early stopping applies.
    `best` is updated in place; rounds are numbered from `start_round + 1`. Returns one history
    record per round (`trials` counts from 0 in this call; see `progress.round_record`). The task
    scheduler calls it again and again on one policy and measurer, a few rounds at a time.

    With `opts.pipeline` the next batch is searched while this one is built and runs on the GPU
    (each batch is measured in a background thread): the model update of round k runs while
    round k+1's kernels are generated, and the search starts right after it. The batch
    measured in round k+1 was then chosen by the model of round k-1. As soon as that search
    ends, its batch starts to compile, beside the end of the batch before: a batch's last,
    slowest kernels compile on a few cores and its last kernels run on the GPU, and the next
    batch's compilers take the other cores meanwhile instead of waiting for them. So up to two
    batches are measured at once, and the measurer is called from two threads
    (`protocols.Measurer`). The search is then what a round waits for, and the compilers keep
    the cores busy beside it: `autosched tune` runs the search's workers level with them
    (`SearchParams.worker_niceness`).
    A round ends with whichever batch in flight ends first: a batch held up by one slow compile
    (a kernel that spills, or runs into the compile timeout) then holds up neither the model
    update nor the next search, whose model lacks only the batch still being measured.
    The first batch of a call is measured alone, so that the second is chosen by a model trained
    on it. A search is only started for trials this call still has to measure, so no searched
    state is left unmeasured at the end; when early stopping ends the loop, a batch already
    being measured is waited for and counted as a round. Pipelined or not, Ctrl-C waits for the
    batches being measured (their records are written) before it stops the loop; a second one
    stops at once."""
    flop = task.compute_dag.flop_count
    total = opts.num_measure_trials
    done, rnd = 0, start_round
    history: list[dict] = []
    if total <= 0:
        return history
    window_start = time.perf_counter()
    update = _ModelUpdate(policy)
    flying: list[_InFlight] = []  # the batches being measured, oldest first
    searches: list[Span] = []  # the searches run in this round's window
    searching = True  # until early stopping or an exhausted space ends the search

    def search_and_start(n: int) -> None:
        nonlocal searching
        searched = _search(policy, n)
        searches.append(searched.span)
        if not searched.batch:
            searching = False
            if opts.verbose:
                print("search space exhausted: no new states to measure")
            return
        measuring = Background(functools.partial(_measure, measurer, searched.batch), "measure")
        flying.append(_InFlight(searched, measuring))  # listed before it starts: see Background
        measuring.start()

    try:
        search_and_start(min(opts.num_measures_per_round, total))
        while flying:
            rnd += 1
            left = total - done - sum(len(f.searched.batch) for f in flying)
            model_s = 0.0
            # the first batch is measured alone, so that the second is chosen by a trained model
            if opts.pipeline and searching and left > 0 and rnd > start_round + 1:
                model_s = update.run()  # the last round's, while this one compiles
                search_and_start(min(opts.num_measures_per_round, left))
            # whichever batch ends first: a batch held up by a slow compile holds up no search
            measuring = first_done([f.measuring for f in flying])
            current = next(f for f in flying if f.measuring is measuring)
            flying.remove(current)
            batch = current.searched.batch
            results, measure_span, split = measuring.result()
            costs = [r.mean_cost for r in results]
            for s, c in zip(batch, costs, strict=True):
                policy.add_measured(s, c)
                best.offer(c, s, rnd)
            update.add(batch, costs)
            if not flying:  # the next search (or the caller) needs the model now
                model_s += update.run()
            window_end = time.perf_counter()
            done += len(batch)
            times = RoundTimes(
                window=Span(window_start, window_end),
                search=current.searched.span.seconds,
                measure=measure_span,
                build=split["build"],
                run=split["run"],
                model=model_s,
                searches=list(searches),
            )
            window_start = window_end
            searches.clear()
            history.append(round_record(rnd, done, costs, best.cost, flop, times))
            history[-1]["search_detail"] = current.searched.detail
            if opts.verbose:
                print(progress_line(history[-1], len(batch)), flush=True)
            if searching and opts.early_stopping and rnd - best.round >= opts.early_stopping:
                searching = False
                if opts.verbose:
                    print(f"early stopping: no improvement in {opts.early_stopping} rounds")
            if not flying and searching and done < total:
                search_and_start(min(opts.num_measures_per_round, total - done))
    except BaseException:  # Ctrl-C, or a failed search: keep the batches' records
        for f in flying:
            _finish_after_interrupt(f.measuring, opts.verbose)
        raise
    update.run()
    return history


@dataclass(frozen=True)
class _Searched:
    """A batch the policy proposed, when its search ran and the policy's account of it."""

    batch: list[State]
    span: Span
    detail: dict[str, float]


@dataclass(frozen=True)
class _InFlight:
    """A searched batch and its measurement, running in a background thread."""

    searched: _Searched
    measuring: Background[tuple[list[MeasureRecordResult], Span, dict[str, float]]]


class _ModelUpdate:
    """The measured batches the policy's model has not been trained on yet, and the update that
    trains it on them (`run`, a no-op when there are none; it returns its seconds)."""

    def __init__(self, policy: SearchPolicy) -> None:
        self.policy = policy
        self.batches: list[tuple[list[State], list[float]]] = []

    def add(self, states: list[State], costs: list[float]) -> None:
        self.batches.append((states, costs))

    def run(self) -> float:
        t0 = time.perf_counter()
        for states, costs in self.batches:
            self.policy.update_model(states, costs)
        self.batches = []
        return time.perf_counter() - t0


def _search(policy: SearchPolicy, n: int) -> _Searched:
    t0 = time.perf_counter()
    batch = policy.search_one_round(n)
    span = Span(t0, time.perf_counter())
    return _Searched(batch, span, dict(policy.last_round))


def _measure(
    measurer: Measurer, batch: Sequence[State]
) -> tuple[list[MeasureRecordResult], Span, dict[str, float]]:
    """Results, when the measurement ran, and the build / run split of its wall-clock time (all
    of it counts as build for a measurer whose `last_times` is empty)."""
    t0 = time.perf_counter()
    results = measurer.measure(batch)
    span = Span(t0, time.perf_counter())
    split = measurer.last_times
    if not split:
        return results, span, {"build": span.seconds, "run": 0.0}
    run = min(split.get("run", 0.0), span.seconds)
    return results, span, {"build": span.seconds - run, "run": run}


def _finish_after_interrupt(measuring: Background, verbose: int) -> None:
    """After Ctrl-C (or a search that raised): let the batch being measured finish, so that its
    records are written (the measurer's callbacks run at the end of a batch); a second Ctrl-C
    gives up on it."""
    if measuring.done():
        return
    if verbose:
        print("stopping: waiting for the batch being measured (Ctrl-C again to stop now)")
    try:
        measuring.result()
    except (KeyboardInterrupt, Exception):  # what stopped the loop is what the caller hears of
        pass
