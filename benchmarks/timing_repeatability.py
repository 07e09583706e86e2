"""How much timing a search candidate needs: rank agreement of repeated measurements per
`min_repeat_ms`, on the GPU.

    python3 benchmarks/timing_repeatability.py --workload conv2d_bias_relu --count 64 \
        --min-repeat-ms 10 5 2 --json out.json

Samples `count` random states, builds them once, then times every correct kernel in two separate
passes per `min_repeat_ms` setting (runner defaults otherwise: number 3, repeat 3). Prints per
setting: the runner's seconds per candidate (and its phases), the median and 95th percentile of
the relative difference between the two passes, and the Kendall rank correlation of the two passes
and of each pass with the reference ranking (the mean of every pass of every setting).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kendall_tau(a, b) -> float:
    """Kendall's tau-a of two equally long sequences (no scipy)."""
    a, b = np.asarray(a), np.asarray(b)
    sa = np.sign(a[:, None] - a[None, :])
    sb = np.sign(b[:, None] - b[None, :])
    n = len(a)
    return float((sa * sb).sum() / (n * (n - 1))) if n > 1 else 1.0


def main(argv: list[str] | None = None) -> int:
    from autosched.codegen.build import build
    from autosched.compat import generate_sketches
    from autosched.search.program_measurer import task_reference
    from autosched.sketch import SketchSampler
    from autosched.task.search_task import suite_task
    from autosched.task.workloads import SUITE
    from measure import LocalBuilder, LocalRunner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="conv2d_bias_relu", choices=list(SUITE))
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-repeat-ms", type=float, nargs="+", default=[10.0, 5.0, 2.0])
    ap.add_argument("--json", default=None)
    ns = ap.parse_args(argv)

    task = suite_task(ns.workload)
    states = SketchSampler(generate_sketches(task)).sample(ns.count, ns.seed)
    artifacts = [build(task.compute_dag, s).artifact(task.workload_key) for s in states]
    refs = {task.workload_key: task_reference(task, artifacts[0].args)}
    with LocalBuilder() as builder:
        builds = builder.build(artifacts)
    ok = [i for i, b in enumerate(builds) if b.ok]
    passes: dict[float, list[np.ndarray]] = {}
    summary = {"workload": ns.workload, "states": len(states), "built": len(ok), "settings": []}
    for ms in ns.min_repeat_ms:
        runner = LocalRunner(min_repeat_ms=ms)
        try:
            costs, started = [], time.perf_counter()
            for _ in range(2):
                results = runner.run([artifacts[i] for i in ok], [builds[i] for i in ok], refs)
                costs.append(np.array([r.mean_cost for r in results]))
            seconds = time.perf_counter() - started
            phases = {k: round(v / (2 * len(ok)) * 1e3, 2) for k, v in runner.phase_seconds.items()}
        finally:
            runner.close()
        passes[ms] = costs
        summary["settings"].append(
            {
                "min_repeat_ms": ms,
                "ms_per_candidate": round(seconds / (2 * len(ok)) * 1e3, 1),
                "phases_ms": phases,
            }
        )
    good = np.all([np.isfinite(c) for cs in passes.values() for c in cs], axis=0)
    reference = np.mean([c[good] for cs in passes.values() for c in cs], axis=0)
    for row in summary["settings"]:
        a, b = (c[good] for c in passes[row["min_repeat_ms"]])
        diff = np.abs(a - b) / np.minimum(a, b)
        row.update(
            {
                "correct": int(good.sum()),
                "pass_difference_median_pct": round(float(np.median(diff)) * 100, 2),
                "pass_difference_p95_pct": round(float(np.percentile(diff, 95)) * 100, 2),
                "kendall_between_passes": round(kendall_tau(a, b), 4),
                "kendall_vs_reference": round(
                    (kendall_tau(a, reference) + kendall_tau(b, reference)) / 2, 4
                ),
            }
        )
        print(json.dumps(row), flush=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
