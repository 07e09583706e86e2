"""When does a kernel's time step from the record's to the benchmark's? A timeline (GPU).

    python3 benchmarks/results/2026-11-26_d75e5ce_h200x2/module_age.py OUT.jsonl LOG

`clock_test.py` and `retime_gap.py` saw a freshly loaded module's first readings at the record's
time (the seed-1 split-K best: 23.2-23.3 µs) and later ones about 1 µs slower (24.4), once the
benchmark's launchers had run the same code, even for modules loaded afresh after that. This
reads the same kernel, in one fresh process, as a timeline of runner-worker readings (about
20 ms of GPU work each): 40 readings with a new module each (the runner's way), 40 with one
module kept, then 2 s of the benchmark's launchers running the code, then 20 more of each, then
20 with a new module each once every other module of the code is released (does the driver
share identical modules' code, and with it whatever slows them?), then 20 more after a 10 s rest.
Each row: phase, reading number, seconds since start, µs.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "benchmarks"))
sys.path.insert(0, HERE)


class KeptModuleDriver:
    """pycuda's driver module, but `module_from_buffer` returns one module per cubin, kept."""

    def __init__(self, drv) -> None:
        self._drv = drv
        self._modules: dict[bytes, object] = {}

    def module_from_buffer(self, cubin):
        key = bytes(cubin)
        if key not in self._modules:
            self._modules[key] = self._drv.module_from_buffer(cubin)
        return self._modules[key]

    def __getattr__(self, name):
        return getattr(self._drv, name)


def main(out_path: str, log: str) -> None:
    import pycuda.driver as drv
    import torch
    from retime_gap import best_kernel, keep_busy, torch_sets, worker_reading, worker_request
    from torch_timing import kernel_rotation_copies, shared_stream

    from autosched.codegen.gpu_call import _context
    from measure._worker import Worker
    from measure.cuda_graph import load_graph_driver

    torch.zeros(1, device="cuda")
    _context()
    kernel, res = best_kernel(log)
    req = worker_request(kernel)
    device = drv.Context.get_device()
    fresh = Worker(drv, device, load_graph_driver())
    kept = Worker(KeptModuleDriver(drv), device, load_graph_driver())
    start = time.time()
    rows = []

    def read(phase: str, worker, count: int) -> None:
        for k in range(count):
            us = worker_reading(worker, req)
            rows.append({"phase": phase, "k": k, "t": time.time() - start, "us": us})

    read("fresh_module", fresh, 40)
    read("kept_module", kept, 40)
    sets = torch_sets(torch, kernel, kernel_rotation_copies(kernel))
    launchers = [kernel.launcher(*s) for s in sets]
    keep_busy(launchers, shared_stream()[0], 2.0)
    read("fresh_after_launcher", fresh, 20)
    read("kept_after_launcher", kept, 20)
    # Release every other module of this code (the launchers' cached one, the kept one): if
    # the driver shares the code of identical modules, the worker's next loads are fresh again.
    import gc

    from autosched.codegen import gpu_call

    del launchers, kept
    gpu_call._module.cache_clear()
    gc.collect()
    read("fresh_after_release", fresh, 20)
    time.sleep(10.0)
    read("fresh_after_rest", fresh, 20)
    with open(out_path, "w") as out:
        for row in rows:
            out.write(json.dumps({"log": log, "record_us": res.mean_cost * 1e6, **row}) + "\n")
    for phase in dict.fromkeys(r["phase"] for r in rows):
        got = [round(r["us"], 2) for r in rows if r["phase"] == phase]
        print(f"{phase}: {got}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
