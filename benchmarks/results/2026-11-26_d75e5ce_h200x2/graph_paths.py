"""The same launches timed through PyTorch's CUDA graphs and through the runner's (GPU).

    python3 benchmarks/results/2026-11-26_d75e5ce_h200x2/graph_paths.py OUT.jsonl LOG...

`retime_gap.py` found the runner's worker, driven in the benchmark's own process, stream and
buffers, agreeing with the record, and `torch_timing.time_graph` about 1 µs a call above it for
a three-kernel program. This times one set of launchers (100 calls a graph, inputs rotated,
median of 20 replays between events) captured by `torch.cuda.graph` (capture modes global,
thread_local, relaxed) and by `measure.cuda_graph` (the runner's capture, instantiated with
flags 0, AUTO_FREE_ON_LAUNCH, USE_NODE_PRIORITY), and PyTorch's own conv2d+bias+relu both
ways where the runner's capture accepts it. One JSON line per log, µs per call.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, HERE)

FLAGS = {"flags0": 0, "auto_free": 1, "node_priority": 8}


def torch_graph(calls, stream, mode: str) -> float:
    """µs per call by `torch_timing.time_graph`, captured in capture mode `mode`."""
    from torch_timing import time_graph

    return time_graph(calls, stream=stream, capture_error_mode=mode) * 1e6


def driver_graph(torch, calls, stream, flags: int, number=100, repeat=20) -> float:
    """The runner's capture (measure.cuda_graph: cuStreamBeginCapture thread-local, then
    cuGraphInstantiateWithFlags(flags)), replays timed between torch events on the stream."""
    from measure.cuda_graph import load_graph_driver

    drv = load_graph_driver()
    assert drv is not None
    handle = ctypes.c_void_p(stream.cuda_stream)
    with torch.cuda.stream(stream):
        for k in range(3):
            calls[k % len(calls)]()
    stream.synchronize()
    drv.call("cuStreamBeginCapture_v2", handle, 1)
    raw = ctypes.c_void_p()
    try:
        with torch.cuda.stream(stream):
            for k in range(number):
                calls[k % len(calls)]()
    finally:
        drv.call("cuStreamEndCapture", handle, ctypes.byref(raw))
    exe = ctypes.c_void_p()
    drv.call("cuGraphInstantiateWithFlags", ctypes.byref(exe), raw, flags)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(repeat + 1)]
    with torch.cuda.stream(stream):
        drv.call("cuGraphLaunch", exe, handle)
        events[0].record()
        for event in events[1:]:
            drv.call("cuGraphLaunch", exe, handle)
            event.record()
    events[-1].synchronize()
    drv.call("cuGraphExecDestroy", exe)
    drv.call("cuGraphDestroy", raw)
    return statistics.median(
        a.elapsed_time(b) * 1e3 / number for a, b in zip(events, events[1:], strict=False)
    )


def main(out_path: str, logs: list[str]) -> None:
    import torch
    from retime_gap import torch_sets
    from torch_timing import TORCH_EQUIVALENTS, kernel_rotation_copies, shared_stream

    import autosched
    from autosched.records import load_best
    from autosched.schedule.compute_dag import ComputeDAG

    torch.zeros(1, device="cuda")
    with open(out_path, "w") as out:
        for log in logs:
            inp, res = load_best(log)
            dag = ComputeDAG.from_workload_key(inp.workload_key)
            kernel = autosched.build(dag, dag.replay_steps(inp.steps))
            copies = kernel_rotation_copies(kernel)
            sets = torch_sets(torch, kernel, copies)
            launchers = [kernel.launcher(*s) for s in sets]
            ours, stream = shared_stream()
            calls = [lambda launch=launch, ours=ours: launch(ours) for launch in launchers]
            row = {"log": log, "record_us": res.mean_cost * 1e6, "kernels": len(kernel.launches)}
            for _ in range(2):
                for mode in ("global", "thread_local", "relaxed"):
                    row.setdefault(f"torch_{mode}", []).append(torch_graph(calls, stream, mode))
                for name, flags in FLAGS.items():
                    row.setdefault(f"driver_{name}", []).append(
                        driver_graph(torch, calls, stream, flags)
                    )
            name, *args = json.loads(inp.workload_key)
            fn = TORCH_EQUIVALENTS[name](tuple(args))
            n_in = len([a for a in kernel.args if not a.is_output]) - len(kernel.program.temps)
            pt_calls = [lambda s=s, fn=fn, n=n_in: fn(*s[:n]) for s in sets]
            row["pytorch_torch_graph"] = [torch_graph(pt_calls, stream, "global")]
            try:
                row["pytorch_driver_graph"] = [driver_graph(torch, pt_calls, stream, 0)]
            except Exception as exc:  # PyTorch may refuse a capture it did not start
                row["pytorch_driver_graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
            out.write(json.dumps(row) + "\n")
            out.flush()
            summary = {k: [round(x, 2) for x in v] for k, v in row.items() if isinstance(v, list)}
            print(f"{log}: record {row['record_us']:.2f} {summary}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
