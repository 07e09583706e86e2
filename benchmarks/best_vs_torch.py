"""Time the best kernel of a record log beside PyTorch, on the GPU, in one process.

    python3 benchmarks/best_vs_torch.py LOG [--json out.json]

Rebuilds the fastest correct record, checks it against PyTorch on the same inputs and times both
(torch_timing.compare_with_torch, inputs rotated, median): GPU time from CUDA graph replays
(`ours_us`, `torch_fp32_us`, `torch_tf32_us`; the search's runner times `search_best_us` the
same way, from a warm L2 cache) and eager back-to-back calls (`*_eager_us`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str] | None = None) -> int:
    from torch_timing import compare_with_torch

    import autosched
    from autosched.records import load_best, load_records
    from autosched.schedule.compute_dag import ComputeDAG

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--json", default=None)
    ns = ap.parse_args(argv)
    inp, res = load_best(ns.log)
    dag = ComputeDAG.from_workload_key(inp.workload_key)
    kernel = autosched.build(dag, dag.replay_steps(inp.steps))
    name, *args = json.loads(inp.workload_key)
    out = {
        "workload_key": inp.workload_key,
        "records": sum(1 for _ in load_records(ns.log)),
        "search_best_us": res.mean_cost * 1e6,
        **compare_with_torch(name, tuple(args), kernel),
    }
    print(json.dumps(out, indent=1))
    print(
        f"GPU time (graph): ours {out['ours_us']:.1f} µs, torch fp32 {out['torch_fp32_us']:.1f},"
        f" TF32 {out['torch_tf32_us']:.1f} | eager: ours {out['ours_eager_us']:.1f},"
        f" fp32 {out['torch_fp32_eager_us']:.1f}, TF32 {out['torch_tf32_eager_us']:.1f}"
    )
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
