"""Is the record's 1 µs edge over the benchmark a matter of how long the GPU was busy? (GPU)

    python3 benchmarks/results/2026-11-26_d75e5ce_h200x2/clock_test.py OUT.jsonl LOG

`retime_gap.py` and `graph_paths.py` left one difference between the runner's worker (driven in
this process) and the benchmark's `time_graph`: the worker times 3 replays of about 5 ms right
after an idle GPU, the benchmark 20 replays of 2.4 ms after warm-up. Here the same launches are
timed by both, each after the GPU rested 2 s and after 0.5 s of sustained replays of the
kernel, and by the benchmark with the worker's shape (3 replays of 226 calls); SM clock and
power are logged by nvidia-smi alongside (OUT.smi.csv).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "benchmarks"))
sys.path.insert(0, HERE)


def main(out_path: str, log: str) -> None:
    import torch
    from retime_gap import bench, best_kernel, keep_busy, torch_sets
    from torch_timing import kernel_rotation_copies, shared_stream

    smi = subprocess.Popen(
        [
            "nvidia-smi",
            "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
            "--format=csv,noheader",
            "-lms",
            "50",
        ],
        stdout=open(out_path + ".smi.csv", "w"),
    )
    torch.zeros(1, device="cuda")
    kernel, res = best_kernel(log)
    sets = torch_sets(torch, kernel, kernel_rotation_copies(kernel))
    launchers = [kernel.launcher(*s) for s in sets]
    ours, _ = shared_stream()

    def load(seconds: float) -> None:
        keep_busy(launchers, ours, seconds)

    rows = []
    for rep in range(3):
        for name, timer in (
            ("worker", worker_timer(kernel)),
            ("bench", lambda: bench(launchers, count=1)),
            ("bench_3x226", lambda: bench_short(launchers)),
        ):
            for before in ("rest", "busy"):
                time.sleep(2.0)
                if before == "busy":
                    load(0.5)
                t0 = time.time()
                us = timer()[0]
                rows.append({"rep": rep, "timer": name, "before": before, "us": us, "t": t0})
                print(rep, name, before, round(us, 2), flush=True)
    smi.terminate()
    with open(out_path, "w") as out:
        for row in rows:
            out.write(json.dumps({"log": log, "record_us": res.mean_cost * 1e6, **row}) + "\n")
    for name in ("worker", "bench", "bench_3x226"):
        for before in ("rest", "busy"):
            got = [r["us"] for r in rows if r["timer"] == name and r["before"] == before]
            print(f"{name:12s} after {before}: median {statistics.median(got):.2f} us {got}")


def worker_timer(kernel):
    """A function timing the kernel once by the runner's worker in this process (built and
    loaded once, so that nothing but the timing runs between the load and the reading)."""
    import pycuda.driver as drv
    from retime_gap import worker_reading, worker_request

    from measure._worker import Worker
    from measure.cuda_graph import load_graph_driver

    req = worker_request(kernel)
    worker = Worker(drv, drv.Context.get_device(), load_graph_driver())
    return lambda: [worker_reading(worker, req)]


def bench_short(launchers) -> list[float]:
    """time_graph with the worker's shape: 226 calls a graph, 3 replays, their median."""
    from torch_timing import shared_stream, time_graph

    ours, stream = shared_stream()
    calls = [lambda launch=launch, ours=ours: launch(ours) for launch in launchers]
    return [time_graph(calls, number=226, repeat=3, stream=stream) * 1e6]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
