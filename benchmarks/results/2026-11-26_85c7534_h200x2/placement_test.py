"""Does a kernel's time follow where its buffers lie, or what ran before it? (GPU)

    python3 benchmarks/results/2026-11-26_85c7534_h200x2/placement_test.py MODE OUT.jsonl LOG

`../2026-11-26_d75e5ce_h200x2/module_age.py` saw the runner's worker read the seed-1 split-K
best at 18.7 µs until the benchmark's launchers had been made and run for 2 s, and 19.4 µs from
then on, in new modules,
after the launchers were released and after a 10 s rest; the torch buffer sets stayed allocated
throughout. Each MODE runs in a fresh process and reads the kernel with the runner's worker
(the buffers it allocates for each reading logged) between steps:
- torch: 10 readings, then after each of: the benchmark's torch buffer sets allocated, its
  launchers made (their scratch buffers), the launchers run for 2 s, everything released.
- hold: 10 readings, then 5 with a held pycuda allocation of each of several sizes before the
  worker's own (so its buffers lie elsewhere), nothing run in between.
- run_worker_buffers: 10 readings, then the launchers run 2 s over buffers pycuda allocates
  (no torch tensor), then 10 readings.
- b2b: the worker itself times the kernel by back-to-back launches (no graph) for 2 s.
- torch_eager: 2 s of unrelated eager PyTorch work (2048^2 matmuls).
- sync_each: the launchers run 2 s, the stream synchronized after every call.
- short: the launchers run 0.02, 0.1, 0.3, 1 and 2 s more, readings between.
- graph_bench: the benchmark's own reading (graph replays of the launchers) repeated for 2 s.
- new_stream: a new non-blocking stream made (nothing run), then one call launched on it.
- side_count: 4, 16, 64 and 256 calls in all on a new non-blocking stream.
- torch_side: 500 PyTorch adds on a torch side stream.
- prime_noop: 500 launches of an empty kernel on a new non-blocking stream.
- default_stream: 400 calls of the launchers on the legacy default stream, then a new stream
  made.
Each row: mode, step, reading number, µs, the worker's allocations (address, bytes).
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "benchmarks"))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-26_d75e5ce_h200x2"))  # retime_gap


class AllocationLog:
    """pycuda's driver module, logging the address and size of every `mem_alloc`."""

    def __init__(self, drv) -> None:
        self._drv = drv
        self.allocations: list[tuple[int, int]] = []

    def mem_alloc(self, nbytes):
        buf = self._drv.mem_alloc(nbytes)
        self.allocations.append((int(buf), int(nbytes)))
        return buf

    def __getattr__(self, name):
        return getattr(self._drv, name)


def main(mode: str, out_path: str, log: str) -> None:
    import pycuda.driver as drv
    import torch
    from retime_gap import best_kernel, keep_busy, torch_sets, worker_reading, worker_request
    from torch_timing import kernel_rotation_copies, shared_stream

    from autosched.codegen.gpu_call import GPULauncher, _context
    from measure._worker import Worker
    from measure.cuda_graph import load_graph_driver

    torch.zeros(1, device="cuda")
    _context()
    kernel, res = best_kernel(log)
    req = worker_request(kernel)
    logged = AllocationLog(drv)
    worker = Worker(logged, drv.Context.get_device(), load_graph_driver())
    rows = []

    def read(step: str, count: int) -> None:
        for k in range(count):
            logged.allocations.clear()
            us = worker_reading(worker, req)
            rows.append(
                {"mode": mode, "step": step, "k": k, "us": us, "allocs": list(logged.allocations)}
            )
        got = [round(r["us"], 2) for r in rows if r["step"] == step]
        print(f"{mode} {step}: {got}", flush=True)

    def run_for(launchers, seconds: float) -> None:
        keep_busy(launchers, shared_stream()[0], seconds)  # a new stream each time

    copies = kernel_rotation_copies(kernel)
    read("first", 10)
    if mode == "torch":
        sets = torch_sets(torch, kernel, copies)
        read("sets_allocated", 10)
        launchers = [kernel.launcher(*s) for s in sets]
        read("launchers_made", 10)
        run_for(launchers, 2.0)
        read("launchers_ran", 10)
        del launchers, sets
        torch.cuda.empty_cache()
        read("released", 10)
    elif mode == "hold":
        for mb in (1, 2, 3, 5, 8, 13, 32, 64, 135):
            held = drv.mem_alloc(mb << 20)
            read(f"hold_{mb}MB", 5)
            held.free()
        read("none_held", 5)
    elif mode == "run_worker_buffers":
        temps = {b.name for b in kernel.program.temps}
        import numpy as np

        rng = np.random.default_rng(0)
        buffers = []
        for _ in range(copies):
            bufs = []
            for a in kernel.args:
                if a.name not in temps:
                    bufs.append(drv.mem_alloc(max(1, a.nbytes)))
                    drv.memcpy_htod(bufs[-1], rng.random(a.shape, dtype=np.float32))
            buffers.append(bufs)

        class Pointer:
            def __init__(self, buf) -> None:
                self.buf = buf

            def data_ptr(self) -> int:
                return int(self.buf)

        launchers = [GPULauncher(kernel, tuple(Pointer(b) for b in bs)) for bs in buffers]
        read("buffers_made", 10)
        run_for(launchers, 2.0)
        read("launchers_ran", 10)
    elif mode == "b2b":
        plain = dict(req, graphs=False)
        end = time.time() + 2.0
        while time.time() < end:
            worker_reading(worker, plain, timing="back-to-back")
        read("after_worker_back_to_back", 10)
    elif mode == "torch_eager":
        x = torch.rand(2048, 2048, device="cuda")
        end = time.time() + 2.0
        while time.time() < end:
            for _ in range(50):
                x = torch.relu(x @ x * 1e-3)
            torch.cuda.synchronize()
        read("after_torch_eager", 10)
    elif mode == "new_stream":
        from autosched.codegen.gpu_call import new_stream

        side = new_stream()
        read("after_stream_made", 10)
        sets = torch_sets(torch, kernel, copies)
        launchers = [kernel.launcher(*s) for s in sets]
        launchers[0](side)
        side.synchronize()
        read("after_one_call_on_it", 10)
    elif mode == "default_stream":
        sets = torch_sets(torch, kernel, copies)
        launchers = [kernel.launcher(*s) for s in sets]
        for k in range(400):
            launchers[k % len(launchers)]()
        torch.cuda.synchronize()
        read("after_400_calls_on_the_legacy_stream", 10)
        from autosched.codegen.gpu_call import new_stream

        side = new_stream()
        read("after_stream_made", 10)
    elif mode == "side_count":
        from autosched.codegen.gpu_call import new_stream

        side = new_stream()
        sets = torch_sets(torch, kernel, copies)
        launchers = [kernel.launcher(*s) for s in sets]
        done = 0
        for calls in (4, 16, 64, 256):
            for k in range(calls - done):
                launchers[k % len(launchers)](side)
            side.synchronize()
            done = calls
            read(f"after_{calls}_calls_on_a_new_stream", 5)
    elif mode == "torch_side":
        x = torch.rand(1024, device="cuda")
        with torch.cuda.stream(torch.cuda.Stream()):
            for _ in range(500):
                x.add_(1.0)
        torch.cuda.synchronize()
        read("after_500_torch_adds_on_a_side_stream", 10)
    elif mode == "prime_noop":
        from autosched.codegen.gpu_call import new_stream
        from measure import compile_kernel, device_arch

        source = 'extern "C" __global__ void noop() {}'
        _, msg, cubin, _ = compile_kernel(source, device_arch() or "sm_90")
        assert cubin is not None, msg
        noop = drv.module_from_buffer(cubin).get_function("noop")
        side = new_stream()
        for _ in range(500):
            noop(block=(32, 1, 1), grid=(1, 1), stream=side)
        side.synchronize()
        read("after_500_noops_on_a_new_stream", 10)
    elif mode in ("sync_each", "short", "graph_bench"):
        sets = torch_sets(torch, kernel, copies)
        launchers = [kernel.launcher(*s) for s in sets]
        read("launchers_made", 10)
        if mode == "sync_each":
            ours, _ = shared_stream()
            end = time.time() + 2.0
            k = 0
            while time.time() < end:
                launchers[k % len(launchers)](ours)
                ours.synchronize()
                k += 1
            read(f"after_{k}_synchronized_calls", 10)
        elif mode == "short":
            for seconds in (0.02, 0.1, 0.3, 1.0, 2.0):
                run_for(launchers, seconds)
                read(f"after_{seconds}s_more", 5)
        else:
            from retime_gap import bench

            end = time.time() + 2.0
            n = 0
            while time.time() < end:
                bench(launchers, count=1)
                n += 1
            read(f"after_{n}_benchmark_readings", 10)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    with open(out_path, "w") as out:
        for row in rows:
            out.write(json.dumps({"log": log, "record_us": res.mean_cost * 1e6, **row}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
