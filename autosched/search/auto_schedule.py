"""`auto_schedule(task, search_policy, tuning_options)`: tune one task, and the tuning loop
(`run_trials`) that every search policy runs in (`protocols.SearchPolicy`).

It unpacks into two values as TVM's does, `state, kernel = auto_schedule(...)`, but they are the
best State and its BuiltKernel, not TVM's schedule and tensors (`autosched.build(state, kernel)`
accepts them where a tutorial calls `tvm.build(sch, args, target)`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autosched.errors import AutoschedError, OptionError
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

    def __post_init__(self) -> None:
        from autosched.checks import integer, optional_integer

        integer("num_measure_trials", self.num_measure_trials, 0)
        integer("num_measures_per_round", self.num_measures_per_round, 1)
        optional_integer("early_stopping", self.early_stopping, 1)
        for name in ("builder", "runner"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "local":
                raise OptionError(f'TuningOptions: {name} is an object or "local", not {value!r}')


@dataclass
class TuningResult:
    """What auto_schedule returns: the best state, its built kernel, the best mean cost in
    seconds, and the round history (one dict per round: trials, best, and the wall-clock split
    search / build / run / model). Unpacks as `state, kernel = result`."""

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


def _measure(
    measurer: Measurer, batch: Sequence[State]
) -> tuple[list[MeasureRecordResult], dict[str, float]]:
    """Results and the build / run split of their wall-clock time (all of it counts as build
    for a measurer whose `last_times` is empty)."""
    t0 = time.perf_counter()
    results = measurer.measure(batch)
    wall = time.perf_counter() - t0
    split = measurer.last_times
    if not split:
        return results, {"build": wall, "run": 0.0}
    run = min(split.get("run", 0.0), wall)
    return results, {"build": wall - run, "run": run}


def _round_record(
    rnd: int, done: int, costs: list[float], best: BestSoFar, flop: float, times: dict[str, float]
) -> dict:
    n_ok = sum(math.isfinite(c) for c in costs)
    return {
        "round": rnd,
        "trials": done,
        "ok": n_ok,
        "best_us": best.cost * 1e6,
        "gflops": flop / best.cost / 1e9 if math.isfinite(best.cost) else 0.0,
        "batch_best_us": min(costs) * 1e6 if n_ok else math.inf,
        "search_s": times["search"],
        "build_s": times["build"],
        "run_s": times["run"],
        "measure_s": times["build"] + times["run"],
        "model_s": times["model"],
        "total_s": sum(times.values()),
    }


def _print_round(rec: dict, batch_size: int) -> None:
    print(
        f"[round {rec['round']:3d}] trials {rec['trials']:5d}  ok {rec['ok']:3d}/{batch_size:3d}"
        f"  best {rec['best_us']:9.2f} us  {rec['gflops']:8.1f} GFLOP/s"
        f"  | search {rec['search_s']:5.2f}s"
        f"  build {rec['build_s']:5.2f}s  run {rec['run_s']:5.2f}s  model {rec['model_s']:5.2f}s",
        flush=True,
    )


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
    record per round (`trials` counts from 0 in this call). The task scheduler calls it again and
    again on one policy and measurer, a few rounds at a time."""
    flop = task.compute_dag.flop_count
    done, rnd, history = 0, start_round, []
    while done < opts.num_measure_trials:
        rnd += 1
        n = min(opts.num_measures_per_round, opts.num_measure_trials - done)
        t0 = time.perf_counter()
        batch = policy.search_one_round(n)
        times = {"search": time.perf_counter() - t0}
        if not batch:
            if opts.verbose:
                print("search space exhausted: no new states to measure")
            break
        results, split = _measure(measurer, batch)
        times.update(split)
        costs = [r.mean_cost for r in results]
        for s, c in zip(batch, costs, strict=True):
            policy.add_measured(s, c)
            best.offer(c, s, rnd)
        t2 = time.perf_counter()
        policy.update_model(batch, costs)
        times["model"] = time.perf_counter() - t2
        done += len(batch)
        history.append(_round_record(rnd, done, costs, best, flop, times))
        history[-1]["search_detail"] = dict(policy.last_round)
        if opts.verbose:
            _print_round(history[-1], len(batch))
        if opts.early_stopping and rnd - best.round >= opts.early_stopping:
            if opts.verbose:
                print(f"early stopping: no improvement in {opts.early_stopping} rounds")
            break
    return history
