"""Tune suite workloads and compare the best kernels with PyTorch on the GPU, in one run.

    python3 benchmarks/run.py --workloads conv2d_bias_relu matmul --trials 256 --out results/
Writes results.json and results.md (workload, FLOPs, autosched µs, torch fp32/TF32 µs, ratio,
GFLOP/s, % of fp32 peak, trials, search time split).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

FP32_PEAK_TFLOPS = 67.0  # H100/H200 FFMA datasheet figure (ANCHORS.md)


def torch_fn(workload: str, args, tf32: bool):
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    r = lambda *s: torch.randn(*s, device="cuda")  # noqa: E731
    if workload == "conv2d_bias_relu":
        N, H, W, CO, CI, KH, KW, st, pad = args
        x, w, b = r(N, CI, H, W), r(CO, CI, KH, KW), r(CO)
        return lambda: torch.relu(F.conv2d(x, w, b, stride=st, padding=pad))
    if workload == "conv2d":
        N, H, W, CO, CI, KH, KW, st, pad = args
        x, w = r(N, CI, H, W), r(CO, CI, KH, KW)
        return lambda: F.conv2d(x, w, stride=st, padding=pad)
    if workload == "matmul":
        N, M, K = args
        a, b = r(N, K), r(K, M)
        return lambda: a @ b
    if workload == "depthwise_conv2d":
        N, C, H, W, KH, KW, st, pad = args
        x, w = r(N, C, H, W), r(C, 1, KH, KW)
        return lambda: F.conv2d(x, w, stride=st, padding=pad, groups=C)
    if workload == "batch_matmul":
        B, N, M, K = args
        a, b = r(B, N, K), r(B, M, K)
        return lambda: torch.bmm(a, b.transpose(1, 2))
    if workload == "dense_bias":
        N, IN, OUT = args
        x, w, b = r(N, IN), r(OUT, IN), r(OUT)
        return lambda: F.linear(x, w, b)
    if workload == "softmax":
        x = r(*args)
        return lambda: torch.softmax(x, dim=-1)
    raise KeyError(workload)


def main() -> int:
    from measure import LocalBuilder, LocalMeasureContext, LocalRunner

    import autosched
    from autosched.program_measurer import task_reference
    from autosched.search_policy import SearchParams, SketchPolicy
    from autosched.workloads import SUITE
    from torch_timing import time_torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", nargs="*", default=list(SUITE))
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--population", type=int, default=64)
    ap.add_argument("--n-jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="bench_out")
    ns = ap.parse_args()
    os.makedirs(ns.out, exist_ok=True)
    rows = []
    for name in ns.workloads:
        wl, args, _ = SUITE[name]
        task = autosched.SearchTask(wl, args)
        log = os.path.join(ns.out, f"{name}.json")
        params = SearchParams(population=ns.population, generations=2, n_jobs=ns.n_jobs)
        policy = SketchPolicy(task, autosched.XGBModel(nthread=4), params)
        t0 = time.perf_counter()
        res = autosched.auto_schedule(task, policy, autosched.TuningOptions(
            num_measure_trials=ns.trials, num_measures_per_round=ns.per_round,
            measure_callbacks=[autosched.RecordToFile(log)]))
        wall = time.perf_counter() - t0
        # Re-time the best kernel with the benchmark method (100 back-to-back, median of 20).
        ctx = LocalMeasureContext(LocalBuilder(), LocalRunner(number=100, repeat=20, min_repeat_ms=0))
        m = ctx.measure_batch([res.kernel.artifact("ref")], {"ref": task_reference(task, res.kernel.args, seed=7)})[0]
        ctx.close()
        ours = statistics.median(m.costs) if m.costs else float("nan")
        fp32 = time_torch(torch_fn(wl, args, False))
        tf32 = time_torch(torch_fn(wl, args, True))
        flop = task.compute_dag.flop_count
        h = res.history
        rows.append({
            "workload": name, "flop": flop, "ours_us": ours * 1e6, "torch_fp32_us": fp32 * 1e6,
            "torch_tf32_us": tf32 * 1e6, "ratio_vs_fp32": ours / fp32, "gflops": flop / ours / 1e9,
            "pct_fp32_peak": 100 * flop / ours / 1e12 / FP32_PEAK_TFLOPS, "trials": h[-1]["trials"] if h else 0,
            "check": m.error_kind.name, "wall_s": wall,
            "search_s": sum(r["search_s"] for r in h), "measure_s": sum(r["measure_s"] for r in h),
            "model_s": sum(r["model_s"] for r in h), "history": h,
            "schedule": task.compute_dag.print_python_schedule(res.state),
        })
        with open(os.path.join(ns.out, f"{name}.cu"), "w") as f:
            f.write(res.kernel.source)
        json.dump(rows, open(os.path.join(ns.out, "results.json"), "w"), indent=1)
    lines = ["| workload | GFLOP | autosched µs | torch fp32 µs | torch TF32 µs | ours/fp32 | GFLOP/s | % fp32 peak | trials | check | search / measure / model s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['flop'] / 1e9:.3f} | {r['ours_us']:.1f} | {r['torch_fp32_us']:.1f} | "
                     f"{r['torch_tf32_us']:.1f} | {r['ratio_vs_fp32']:.2f} | {r['gflops']:.0f} | {r['pct_fp32_peak']:.1f} | "
                     f"{r['trials']} | {r['check']} | {r['search_s']:.0f} / {r['measure_s']:.0f} / {r['model_s']:.0f} |")
    table = "\n".join(lines)
    open(os.path.join(ns.out, "results.md"), "w").write(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
