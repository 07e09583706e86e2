"""GPU check of hand-written schedules: the seeds' conv2d+bias+relu schedules, built by
autosched, checked against numpy by the measure runner, timed beside PyTorch.

    python3 benchmarks/gpu_check.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

from autosched import build  # noqa: E402
from autosched.search.program_measurer import task_reference  # noqa: E402
from autosched.task.search_task import SearchTask  # noqa: E402
from autosched.task.workloads import SUITE  # noqa: E402
from measure import LocalBuilder, LocalMeasureContext, LocalRunner  # noqa: E402


def main() -> int:
    from workloads_for_tests import (
        SEED_001_TILES,
        SEED_001_VECTORS,
        SEED_002_TILES,
        SEED_002_VECTORS,
        seed_conv_state,
    )

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu_check.json")
    ns = ap.parse_args()
    args = SUITE["conv2d_bias_relu"][1]
    task = SearchTask("conv2d_bias_relu", args)
    dag = task.compute_dag
    variants = {
        "seed001": seed_conv_state(dag, SEED_001_TILES, SEED_001_VECTORS),
        "seed002": seed_conv_state(dag, SEED_002_TILES, SEED_002_VECTORS),
    }
    kernels = {k: build(dag, s) for k, s in variants.items()}
    ref = task_reference(task, next(iter(kernels.values())).args)
    ctx = LocalMeasureContext(LocalBuilder(), LocalRunner(number=100, repeat=20, min_repeat_ms=0))
    arts = [k.artifact(reference_id="ref", tag=name) for name, k in kernels.items()]
    results = ctx.measure_batch(arts, {"ref": ref})
    ctx.close()
    out = {"flop": dag.flop_count, "kernels": {}}
    for name, r in zip(kernels, results, strict=True):
        med = statistics.median(r.costs) if r.costs else None
        out["kernels"][name] = {
            "median_us": med * 1e6 if med else None,
            "error": r.error_kind.name,
            "msg": r.error_msg,
            "resources": {n: vars(v) for n, v in r.resources.items()},
        }
    try:  # the same kernels beside PyTorch, on the same inputs, timed the same way
        from torch_timing import compare_with_torch

        for name, k in kernels.items():
            out["kernels"][name]["vs_torch"] = compare_with_torch("conv2d_bias_relu", args, k)
    except ImportError as exc:  # torch missing: report ours only
        out["torch_error"] = str(exc)
    with open(ns.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
