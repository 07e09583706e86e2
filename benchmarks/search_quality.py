"""The search's quality per CPU-second, without a GPU: tune a workload for a few rounds against a
proxy measurer and print, per round and averaged over seeds, the best proxy cost so far, the
candidates the search lowered and the search's CPU-seconds (this process and its workers).

The proxy measurer costs a state from its lowered program with the crude roofline of
`tests/sim_measurer.simulated_cost` (more parallel threads, fuller blocks and less shared memory
are faster) and skips the interpreter, so a full-size workload is measured in milliseconds. It
ranks launch shapes only, not memory reuse: two search settings that end at the same proxy cost
after the same trials found equally good launches, which is what a cheaper search must not lose.

    python -m benchmarks.search_quality conv2d_bias_relu --rounds 4 --seeds 0 1 \\
        --population 512 --generations 4 --carry-over 0
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from autosched.lower.lowering import lower
from autosched.records import MeasureRecordResult, now
from autosched.search.auto_schedule import TuningOptions, auto_schedule
from autosched.search.params import SearchParams
from autosched.search.policy import SketchPolicy
from autosched.task.search_task import SearchTask
from autosched.task.workloads import SUITE
from measure import MeasureErrorKind
from tests.sim_measurer import simulated_cost


class ProxyMeasurer:
    """A `Measurer` whose cost is `simulated_cost` of the lowered program (no run, no check)."""

    def __init__(self) -> None:
        self.callbacks: list = []
        self.last_times = {"build": 0.0, "run": 0.0}

    def measure(self, states: Sequence) -> list[MeasureRecordResult]:
        """One proxy result per state (a state that does not lower fails)."""
        out = []
        for state in states:
            try:
                cost = simulated_cost(lower(state))
            except Exception as exc:
                kind = int(MeasureErrorKind.INSTANTIATION_ERROR)
                out.append(MeasureRecordResult((), kind, str(exc), timestamp=now()))
                continue
            out.append(MeasureRecordResult((cost, cost), 0, "", 0.0, 0.0, now()))
        for cb in self.callbacks:
            cb([], out)
        return out

    def close(self) -> None:
        """Nothing to release."""


def run_one(task: SearchTask, params: SearchParams, rounds: int, per_round: int) -> list[dict]:
    """Per round: best proxy cost so far (µs), candidates lowered, search CPU-seconds."""
    policy = SketchPolicy(task, params=params, verbose=0)
    opts = TuningOptions(
        num_measure_trials=rounds * per_round,
        num_measures_per_round=per_round,
        measurer=ProxyMeasurer(),
        verbose=0,
    )
    history = auto_schedule(task, policy, opts).history
    return [
        {
            "best_us": record["best_us"],
            "lowered": record["search_detail"]["evaluated"] + record["search_detail"]["sampled"],
            "search_cpu_s": record["search_detail"]["worker_cpu_s"],
        }
        for record in history
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(SUITE))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--population", type=int, default=SearchParams.population)
    parser.add_argument("--generations", type=int, default=SearchParams.generations)
    parser.add_argument("--carry-over", type=float, default=SearchParams.carry_over)
    parser.add_argument("--n-jobs", type=int, default=1)
    ns = parser.parse_args(argv)
    name, args, _ = SUITE[ns.workload]
    task = SearchTask(name, args)
    runs = []
    for seed in ns.seeds:
        params = SearchParams(
            population=ns.population,
            generations=ns.generations,
            carry_over=ns.carry_over,
            n_jobs=ns.n_jobs,
            seed=seed,
        )
        t0 = time.perf_counter()
        runs.append(run_one(task, params, ns.rounds, ns.per_round))
        rows = "  ".join(f"{r['best_us']:.3f}/{r['lowered']}" for r in runs[-1])
        print(f"seed {seed}: {time.perf_counter() - t0:.0f} s; best_us/lowered {rows}", flush=True)
    print(
        f"{ns.workload} population {ns.population} generations {ns.generations} "
        f"carry_over {ns.carry_over} seeds {ns.seeds}"
    )
    print("round  best_us(mean)  best_us(per seed)  lowered  search_cpu_s")
    for k in range(min(len(r) for r in runs)):
        bests = [r[k]["best_us"] for r in runs]
        lowered = statistics.mean(r[k]["lowered"] for r in runs)
        cpu = statistics.mean(r[k]["search_cpu_s"] for r in runs)
        per_seed = " ".join(f"{b:.3f}" for b in bests)
        mean = statistics.mean(bests)
        print(f"{k + 1:5}  {mean:13.3f}  {per_seed:>17}  {lowered:7.0f}  {cpu:12.1f}")


if __name__ == "__main__":
    main()
