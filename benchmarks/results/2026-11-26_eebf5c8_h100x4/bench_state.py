"""What puts the benchmark's graph replays of a one-kernel program in the runner's state? (GPU)

    python3 benchmarks/results/2026-11-26_eebf5c8_h100x4/bench_state.py MODE OUT.jsonl LOG

`tests/test_gpu_timing.py` at eebf5c8 (H100): with both sides settled as `measure/launch_state.py`
says (the worker: 64 empty kernels on its graph stream; `torch_timing.time_graph`: 64 PyTorch adds
on a side stream, once a process), two-kernel split-K programs re-time within 0.1 µs of their
records, but one-kernel bests re-time 0.3-0.4 µs below them. Each MODE runs in a fresh process,
reading the log's best by the benchmark (`bench`: `time_graph` over torch-buffer launchers on a
new shared stream) and by the runner's worker in this process (`worker`) in turn:
- default: bench x3, worker x3, bench x3 (today's code).
- unsettled: the benchmark's settling turned off, bench x3.
- side500: 500 PyTorch adds on a torch side stream first (as the session that found the state
  did), then bench x3.
- own_stream: before each bench reading, 64 PyTorch adds on the capture stream itself.
- warmup16: bench x3 with 16 warm-up calls (not 3) on the capture stream.
- one_stream: bench x3, all three on one shared stream kept for the process.
Each row: mode, step, µs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "benchmarks"))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-26_d75e5ce_h200x2"))  # retime_gap


def main(mode: str, out_path: str, log: str) -> None:
    import pycuda.driver as drv
    import torch
    import torch_timing
    from retime_gap import best_kernel, torch_sets, worker_reading, worker_request
    from torch_timing import kernel_rotation_copies, shared_stream, time_graph

    from autosched.codegen.gpu_call import _context
    from measure._worker import Worker
    from measure.cuda_graph import load_graph_driver

    torch.zeros(1, device="cuda")
    _context()
    kernel, res = best_kernel(log)
    copies = kernel_rotation_copies(kernel)
    launchers = [kernel.launcher(*s) for s in torch_sets(torch, kernel, copies)]
    rows = []
    kept = shared_stream()

    def adds(stream, count: int) -> None:
        x = torch.zeros(1, device="cuda")
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(count):
                x.add_(1.0)
        stream.synchronize()

    def bench(step: str, warmup: int = 3, prelaunch: int = 0, reuse: bool = False) -> None:
        ours, stream = kept if reuse else shared_stream()
        if prelaunch:
            adds(stream, prelaunch)
        calls = [lambda launch=launch: launch(ours) for launch in launchers]
        us = time_graph(calls, stream=stream, warmup=warmup) * 1e6
        rows.append({"mode": mode, "step": step, "us": us})

    worker = None

    def work(step: str) -> None:
        nonlocal worker
        if worker is None:
            worker = Worker(drv, drv.Context.get_device(), load_graph_driver())
        us = worker_reading(worker, worker_request(kernel))
        rows.append({"mode": mode, "step": step, "us": us})

    if mode == "unsettled":
        torch_timing.settle_launch_state = lambda *_: None
    if mode == "side500":
        adds(torch.cuda.Stream(), 500)
    for _ in range(3):
        if mode == "own_stream":
            bench("bench_own_stream", prelaunch=64)
        elif mode == "warmup16":
            bench("bench_warmup16", warmup=16)
        elif mode == "one_stream":
            bench("bench_one_stream", reuse=True)
        else:
            bench("bench")
    if mode == "default":
        for _ in range(3):
            work("worker")
        for _ in range(3):
            bench("bench_after_worker")
    with open(out_path, "a") as out:
        for row in rows:
            row.update(record_us=res.mean_cost * 1e6, kernels=len(kernel.launches), log=log)
            out.write(json.dumps(row) + "\n")
    summary: dict[str, list[float]] = {}
    for row in rows:
        summary.setdefault(row["step"], []).append(round(row["us"], 2))
    print(
        mode,
        os.path.basename(os.path.dirname(log)),
        f"record {res.mean_cost * 1e6:.2f}",
        {k: (v, round(statistics.median(v), 2)) for k, v in summary.items()},
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
