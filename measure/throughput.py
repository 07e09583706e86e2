"""Measure the measurer: build and run a batch of distinct matmul kernels, report throughput.

    python -m measure.throughput --count 64 --parallel 16 [--early-stop 1.5] [--json out.json]

Prints candidates per second for the build (nvcc, in parallel), the run (one worker, checked and
timed) and both together, plus the best kernel and the timing floor of an empty kernel. With
`--early-stop F` each candidate is run with a cost bound of F times the best so far, as a
search's are (measure.timing_plan), and the summary counts those that stopped early.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence

import numpy as np

from measure.artifact import ArgSpec, KernelArtifact, Launch
from measure.builder import BuildResult, LocalBuilder
from measure.errors import MeasureErrorKind
from measure.reference import Reference, make_reference
from measure.runner import LocalRunner, RunResult

BLOCKS = [(8, 8), (16, 16), (32, 8), (8, 32), (16, 8), (32, 4), (4, 32), (32, 32),
          (64, 4), (4, 64), (16, 4), (8, 16), (16, 32), (32, 16), (64, 8), (8, 64)]  # fmt: skip
UNROLLS = [1, 2, 4, 8]
KERNEL = """
extern "C" __global__ void __launch_bounds__(%(threads)d) mm_%(tag)s(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {
  int row = blockIdx.y * %(by)d + threadIdx.y, col = blockIdx.x * %(bx)d + threadIdx.x;
  float acc = 0.0f;
#pragma unroll %(unroll)d
  for (int k = 0; k < %(n)d; ++k) acc += A[row * %(n)d + k] * B[k * %(n)d + col];
  C[row * %(n)d + col] = acc;
}
"""
EMPTY = 'extern "C" __global__ void empty(const float* A, const float* B, float* C) { }'


def matmul_variants(n: int, count: int) -> list[KernelArtifact]:
    """`count` distinct naive n x n x n matmul kernels (block shape x unroll factor)."""
    args = (
        ArgSpec("A", (n, n), "float32"),
        ArgSpec("B", (n, n), "float32"),
        ArgSpec("C", (n, n), "float32", is_output=True),
    )
    arts = []
    for (bx, by), unroll in itertools.islice(itertools.product(BLOCKS, UNROLLS), count):
        tag = f"{bx}x{by}_u{unroll}"
        src = KERNEL % dict(threads=bx * by, tag=tag, bx=bx, by=by, unroll=unroll, n=n)
        launch = Launch(f"mm_{tag}", (n // bx, n // by), (bx, by))
        arts.append(KernelArtifact(src, (launch,), args, "mm", tag))
    return arts


def run_bounded(
    runner: LocalRunner,
    arts: Sequence[KernelArtifact],
    builds: Sequence[BuildResult],
    refs: Mapping[str, Reference],
    factor: float | None,
) -> list[RunResult]:
    """Run the candidates in order, each bounded by `factor` times the best mean cost so far
    (None: in one call, unbounded)."""
    if factor is None:
        return runner.run(arts, builds, refs)
    runs, best = [], math.inf
    for art, build in zip(arts, builds, strict=True):
        bound = best * factor if math.isfinite(best) else None
        runs.append(runner.run([art], [build], refs, cost_bound=bound)[0])
        best = min(best, runs[-1].mean_cost)
    return runs


def main(argv: list[str] | None = None) -> dict:
    """Run the throughput benchmark and print (and return) a summary dict."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=64)
    p.add_argument("--parallel", type=int, default=16)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--json", default=None)
    p.add_argument("--number", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--min-repeat-ms", type=float, default=5.0)
    p.add_argument("--twice", action="store_true", help="run the batch again; report agreement")
    p.add_argument(
        "--early-stop",
        type=float,
        default=0.0,
        metavar="F",
        help="bound each candidate by F times the best so far (0: time every one in full)",
    )
    opts = p.parse_args(argv)

    arts = matmul_variants(opts.n, opts.count)
    ref = make_reference(arts[0].args, lambda A, B: A.astype(np.float64) @ B.astype(np.float64))
    builder = LocalBuilder(n_parallel=opts.parallel)
    timing = dict(number=opts.number, repeat=opts.repeat, min_repeat_ms=opts.min_repeat_ms)
    with LocalRunner(**timing) as runner:
        runner.start()  # worker start-up is not part of the batch
        t0 = time.perf_counter()
        builds = builder.build(arts)
        t1 = time.perf_counter()
        factor = opts.early_stop or None
        runs = run_bounded(runner, arts, builds, {"mm": ref}, factor)
        t2 = time.perf_counter()
        phases = dict(runner.phase_seconds)
        early_stops = runner.early_stops
        again = run_bounded(runner, arts, builds, {"mm": ref}, factor) if opts.twice else None
        empty = KernelArtifact(EMPTY, (Launch("empty", (1,), (32,)),), arts[0].args, None, "empty")
        floor = runner.run([empty], builder.build([empty]))[0]
        device = runner.device_name
    ok = [(a.tag, r.mean_cost) for a, r in zip(arts, runs, strict=True) if r.error_kind == 0]
    best = min(ok, key=lambda x: x[1]) if ok else (None, float("inf"))
    errors: dict[str, int] = {}
    for r in runs:
        if r.error_kind:
            name = MeasureErrorKind(r.error_kind).name
            errors[name] = errors.get(name, 0) + 1
    summary = {
        "device": device,
        "count": len(arts),
        "n_parallel": opts.parallel,
        "build_s": t1 - t0,
        "run_s": t2 - t1,
        "build_per_s": len(arts) / (t1 - t0),
        "run_per_s": len(arts) / (t2 - t1),
        "total_per_s": len(arts) / (t2 - t0),
        "built_ok": sum(b.ok for b in builds),
        "ran_ok": len(ok),
        "errors": errors,
        "best": best[0],
        "best_us": best[1] * 1e6,
        "best_gflops": 2 * opts.n**3 / best[1] / 1e9 if ok else 0.0,
        "empty_kernel_us": floor.mean_cost * 1e6,
        "mean_run_seconds_per_candidate": sum(r.run_seconds for r in runs) / len(runs),
        "timing": timing,
        "early_stop": factor,
        "early_stops": early_stops,
        "phase_seconds": phases,
        "costs_us": {a.tag: r.mean_cost * 1e6 for a, r in zip(arts, runs, strict=True)},
    }
    if again is not None:
        diffs = sorted(
            abs(a.mean_cost - b.mean_cost) / a.mean_cost
            for a, b in zip(runs, again, strict=True)
            if a.error_kind == 0 and b.error_kind == 0
        )
        if diffs:
            summary["rerun_rel_diff_median"] = diffs[len(diffs) // 2]
            summary["rerun_rel_diff_max"] = diffs[-1]
    print(json.dumps({k: v for k, v in summary.items() if k != "costs_us"}, indent=1))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(summary, f, indent=1)
    return summary


if __name__ == "__main__":
    main()
