"""`auto_schedule(task, search_policy, tuning_options)`: the tuning loop users call."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .errors import AutoschedError


@dataclass
class TuningOptions:
    """How much to measure and how (the seeds' shape)."""

    num_measure_trials: int = 64
    num_measures_per_round: int = 64
    early_stopping: int | None = None
    builder: object | None = None
    runner: object | None = None
    measure_callbacks: Sequence[Callable] = ()
    verbose: int = 1
    measurer: object | None = None  # a custom measurer (tests use a simulated one)


@dataclass
class TuningResult:
    """What auto_schedule returns: the best state, its built kernel, and the round history."""

    state: object
    kernel: object
    best_cost: float
    history: list = field(default_factory=list)

    def __iter__(self):  # `state, kernel = auto_schedule(...)`
        return iter((self.state, self.kernel))


def auto_schedule(task, search_policy=None, tuning_options: TuningOptions | None = None) -> TuningResult:
    """Search for a fast schedule of `task`; returns (best state, built kernel)."""
    from .build_module import build
    from .program_measurer import ProgramMeasurer
    from .search_policy import SketchPolicy

    opts = tuning_options or TuningOptions()
    policy = search_policy or SketchPolicy(task, verbose=opts.verbose)
    measurer = opts.measurer or ProgramMeasurer(task, opts.builder, opts.runner, opts.measure_callbacks)
    flop = task.compute_dag.flop_count
    done, history = 0, []
    best_cost, best_state, best_round = math.inf, None, 0
    if policy.measured_states:
        best_cost, best_state = min(policy.measured_states, key=lambda x: x[0])
    rnd = 0
    empty_rounds = 0
    while done < opts.num_measure_trials:
        rnd += 1
        n = min(opts.num_measures_per_round, opts.num_measure_trials - done)
        t0 = time.perf_counter()
        batch = policy.search_one_round(n)
        t_search = time.perf_counter() - t0
        if not batch:
            empty_rounds += 1
            if empty_rounds >= 3:
                if opts.verbose:
                    print("search space exhausted: no new states to measure")
                break
            continue
        empty_rounds = 0
        t1 = time.perf_counter()
        results = measurer.measure(batch)
        t_measure = time.perf_counter() - t1
        costs = [r.mean_cost for r in results]
        for s, c in zip(batch, costs):
            policy.add_measured(s, c)
            if c < best_cost:
                best_cost, best_state, best_round = c, s, rnd
        t2 = time.perf_counter()
        policy.update_model(batch, costs)
        t_model = time.perf_counter() - t2
        done += len(batch)
        n_ok = sum(math.isfinite(c) for c in costs)
        rec = {"round": rnd, "trials": done, "ok": n_ok, "best_us": best_cost * 1e6,
               "gflops": flop / best_cost / 1e9 if math.isfinite(best_cost) else 0.0,
               "search_s": t_search, "measure_s": t_measure, "model_s": t_model,
               "batch_best_us": min(costs) * 1e6 if n_ok else math.inf}
        history.append(rec)
        if opts.verbose:
            print(f"[round {rnd:3d}] trials {done:5d}  ok {n_ok:3d}/{len(batch):3d}  best {rec['best_us']:9.2f} us"
                  f"  {rec['gflops']:8.1f} GFLOP/s  | search {t_search:5.2f}s  measure {t_measure:5.2f}s"
                  f"  model {t_model:5.2f}s", flush=True)
        if opts.early_stopping and rnd - best_round >= opts.early_stopping:
            if opts.verbose:
                print(f"early stopping: no improvement in {opts.early_stopping} rounds")
            break
    if best_state is None:
        raise AutoschedError(f"no correct kernel was found for {task.workload_key} in {done} trials")
    return TuningResult(best_state, build(task.compute_dag, best_state), best_cost, history)
