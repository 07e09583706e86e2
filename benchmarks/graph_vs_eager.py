"""GPU time (CUDA graph replay) beside eager back-to-back time, for a few suite workloads.

    python3 benchmarks/graph_vs_eager.py --workloads dense_bias batch_matmul matmul --out t.json

Per workload: a few sampled schedules are measured by the search's runner (graph replay), the
fastest is kept; then it is timed by the runner both ways (graph replay, back-to-back launches)
and, beside PyTorch's op, by torch_timing.compare_with_torch (graph replay and eager, inputs
rotated). For small operators the eager times carry the host's launch cost; the graph times do
not. (The runner times from a warm L2 cache, the benchmark rotates its inputs past it, so on
small problems the benchmark's graph time of ours may be the higher one.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SAMPLES = 8  # sampled schedules per workload, the fastest kept


def _runner_times(task, kernels: list, graphs: bool) -> tuple[list[float | None], int]:
    """Median seconds per run of each kernel by the runner, and how many it timed back-to-back."""
    from autosched.search.program_measurer import task_reference
    from measure import LocalBuilder, LocalMeasureContext, LocalRunner

    ref = task_reference(task, kernels[0].args)
    runner = LocalRunner(repeat=10, graphs=graphs)
    with LocalMeasureContext(LocalBuilder(), runner) as ctx:
        results = ctx.measure_batch([k.artifact(reference_id="ref") for k in kernels], {"ref": ref})
    costs = [statistics.median(r.costs) if r.costs else None for r in results]
    return costs, runner.back_to_back_timings


def measure(name: str) -> dict:
    """One workload's row: runner graph / back-to-back and compare_with_torch's times, in µs."""
    from torch_timing import compare_with_torch

    import autosched
    from autosched.search.policy import SearchParams, SketchPolicy
    from autosched.task.search_task import suite_task
    from autosched.task.workloads import SUITE

    task = suite_task(name)
    params = SearchParams(
        population=32, generations=1, sample_init_min_population=SAMPLES, n_jobs=1
    )
    policy = SketchPolicy(task, autosched.RandomModel(), params, verbose=0)
    kernels = [autosched.build(task.compute_dag, s) for s in policy.search_one_round(SAMPLES)]
    costs, _ = _runner_times(task, kernels, graphs=True)
    timed = [(c, k) for c, k in zip(costs, kernels, strict=True) if c is not None]
    if not timed:
        return {"workload": name, "error": "no sampled schedule ran correctly"}
    kernel = min(timed, key=lambda ck: ck[0])[1]
    (graph,), graph_fallbacks = _runner_times(task, [kernel], graphs=True)
    (eager,), _ = _runner_times(task, [kernel], graphs=False)
    workload, args, _ = SUITE[name]
    return {
        "workload": name,
        "runner_graph_us": graph * 1e6 if graph else None,
        "runner_eager_us": eager * 1e6 if eager else None,
        "runner_graph_fallbacks": graph_fallbacks,
        **compare_with_torch(workload, args, kernel),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="*", default=["dense_bias", "batch_matmul", "matmul"])
    ap.add_argument("--out", default="graph_vs_eager.json")
    ns = ap.parse_args(argv)
    rows = []
    for name in ns.workloads:
        rows.append(measure(name))
        with open(ns.out, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{'workload':14s} {'graph µs: runner / ours / fp32 / TF32':>40s}   eager µs: same")
    for r in rows:
        if "error" in r:
            print(f"{r['workload']:14s} {r['error']}")
            continue
        graph = [r["runner_graph_us"], r["ours_us"], r["torch_fp32_us"], r["torch_tf32_us"]]
        eager = [
            r["runner_eager_us"],
            r["ours_eager_us"],
            r["torch_fp32_eager_us"],
            r["torch_tf32_eager_us"],
        ]
        print(
            f"{r['workload']:14s} {' / '.join(_us(x) for x in graph):>40s}   "
            + " / ".join(_us(x) for x in eager)
        )
    return 0


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    raise SystemExit(main())
