"""Why a multi-kernel best re-times above its record: the runner and the benchmark, piece by piece

    python3 benchmarks/results/2026-11-26_d75e5ce_h200x2/retime_gap.py OUT.jsonl LOG...

For each record log's best, in one process with PyTorch, µs per call by:

- `runner`: the search's runner (LocalBuilder + LocalRunner, its own worker process and
  context), as the search timed the record; measured first and last;
- `worker_inproc`: the runner's `measure._worker.Worker` driven in this process (primary
  context, the one PyTorch and the benchmark use), same request as the runner's;
- `bench`: `torch_timing.time_graph` over launchers of torch tensors, as `compare_with_torch`;
- `bench_n200`: the same with 200 calls a graph (about what the runner's calibration takes);
- `bench_runner_layout`: launchers over the runner's buffer layout (every set, temporaries
  included, back to back in one pycuda allocation, `measure.rotation.set_pointers`);
- `bench_no_attr`: launchers whose functions come from a fresh module without the
  MAX_DYNAMIC_SHARED_SIZE_BYTES attribute (only where every launch fits the static limit);
- `bench_kernel_K`: each kernel of the sequence alone (its share of the call).

One JSON line per log.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


class DevicePointer:
    """A raw device address that GPULauncher takes in place of a torch tensor."""

    def __init__(self, address: int) -> None:
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def runner_times(task, kernel, count: int = 3) -> list[float]:
    import autosched  # noqa: F401
    from autosched.search.program_measurer import task_reference
    from measure import LocalBuilder, LocalMeasureContext, LocalRunner

    ref = task_reference(task, kernel.args)
    artifacts = [kernel.artifact(reference_id="ref", tag=str(i)) for i in range(count)]
    with LocalMeasureContext(LocalBuilder(timeout=60.0), LocalRunner()) as ctx:
        results = ctx.measure_batch(artifacts, {"ref": ref})
    return [statistics.mean(r.costs) * 1e6 for r in results if r.costs]


def worker_request(kernel) -> dict:
    """The run request the search's runner sends for `kernel` (no reference check), its cubin
    compiled as the builder compiles it."""
    from measure import compile_kernel, device_arch
    from measure.rotation import ROTATION_BYTES

    _, msg, cubin, _ = compile_kernel(kernel.source, device_arch() or "sm_90")
    assert cubin is not None, msg
    return {
        "op": "run",
        "cubin": cubin,
        "launches": [x.to_dict() for x in kernel.launches],
        "args": [a.to_dict() for a in kernel.args],
        "ref_id": None,
        "ref": None,
        "drop_refs": [],
        "check": False,
        "number": 3,
        "repeat": 3,
        "min_repeat_ms": 5.0,
        "cooldown": 0.0,
        "seed": 0,
        "graphs": True,
        "rotate_bytes": ROTATION_BYTES,
    }


def best_kernel(log: str):
    """(BuiltKernel, result) of a record log's best record, rebuilt as the benchmark builds it."""
    import autosched
    from autosched.records import load_best
    from autosched.schedule.compute_dag import ComputeDAG

    inp, res = load_best(log)
    dag = ComputeDAG.from_workload_key(inp.workload_key)
    return autosched.build(dag, dag.replay_steps(inp.steps)), res


def keep_busy(launchers, stream, seconds: float) -> None:
    """Run `launchers` in turn on `stream` (a pycuda Stream) for `seconds`: 200 calls at a
    time, then a wait for them."""
    end = time.time() + seconds
    while time.time() < end:
        for k in range(200):
            launchers[k % len(launchers)](stream)
        stream.synchronize()


def worker_reading(worker, req: dict, timing: str = "graph") -> float:
    """µs per run of one request served by `worker` (a `measure._worker.Worker`), timed by
    graph replay (or as `timing` says): the mean of its repeats, as the runner records it."""
    reply = worker.handle(req)
    assert reply["costs"], reply
    assert reply["timing"] == timing, reply
    return statistics.mean(reply["costs"]) * 1e6


def worker_times(kernel, count: int = 3) -> list[float]:
    import pycuda.driver as drv

    from measure._worker import Worker
    from measure.cuda_graph import load_graph_driver

    req = worker_request(kernel)
    worker = Worker(drv, drv.Context.get_device(), load_graph_driver())
    return [worker_reading(worker, req) for _ in range(count)]


def torch_sets(torch, kernel, copies):
    temps = {b.name for b in kernel.program.temps}
    return [
        [
            (torch.rand if not a.is_output else torch.empty)(
                a.shape, dtype=getattr(torch, a.dtype), device="cuda"
            )
            for a in kernel.args
            if a.name not in temps
        ]
        for _ in range(copies)
    ]


def bench(launchers, number: int = 100, count: int = 3) -> list[float]:
    from torch_timing import shared_stream, time_graph

    ours, stream = shared_stream()
    calls = [lambda launch=launch: launch(ours) for launch in launchers]
    return [time_graph(calls, number=number, stream=stream) * 1e6 for _ in range(count)]


def main(out_path: str, logs: list[str]) -> None:
    import pycuda.driver as drv
    import torch
    from torch_timing import kernel_rotation_copies

    import autosched
    from autosched.codegen.gpu_call import GPULauncher, _context
    from autosched.records import load_best
    from autosched.schedule.compute_dag import ComputeDAG
    from autosched.task.search_task import SUITE, suite_task
    from measure import compile_kernel, device_arch
    from measure.rotation import copy_sets, set_pointers

    torch.zeros(1, device="cuda")
    _context()
    by_key = {suite_task(name).workload_key: name for name in SUITE}
    with open(out_path, "w") as out:
        for log in logs:
            inp, res = load_best(log)
            task = suite_task(by_key[inp.workload_key])
            dag = ComputeDAG.from_workload_key(inp.workload_key)
            kernel = autosched.build(dag, dag.replay_steps(inp.steps))
            copies = kernel_rotation_copies(kernel)
            row = {
                "log": log,
                "record_us": res.mean_cost * 1e6,
                "kernels": len(kernel.launches),
                "launches": [x.to_dict() for x in kernel.launches],
                "copies": copies,
            }
            row["runner"] = runner_times(task, kernel)
            row["worker_inproc"] = worker_times(kernel)
            sets = torch_sets(torch, kernel, copies)
            launchers = [kernel.launcher(*s) for s in sets]
            row["bench"] = bench(launchers)
            row["bench_n200"] = bench(launchers, number=200)
            # the runner's layout: every set back to back in one allocation
            sizes = [a.nbytes for a in kernel.args]
            first = [drv.mem_alloc(max(1, n)) for n in sizes]
            block = copy_sets(drv, sizes, first, copies)
            pointer_sets = set_pointers(sizes, block, copies)
            laid = [
                GPULauncher(kernel, tuple(DevicePointer(p) for p in ptrs)) for ptrs in pointer_sets
            ]
            row["bench_runner_layout"] = bench(laid)
            limit = drv.Context.get_device().get_attribute(
                drv.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK
            )
            if all(x.dynamic_shared_bytes < limit // 2 for x in kernel.launches):
                _, _, cubin, _ = compile_kernel(kernel.source, device_arch() or "sm_90")
                fresh = drv.module_from_buffer(cubin)
                plain = [kernel.launcher(*s) for s in sets]
                for launcher in plain:
                    calls = []
                    for (_, grid, block_dim, shared), x in zip(
                        launcher.calls, kernel.launches, strict=True
                    ):
                        fn = fresh.get_function(x.kernel_name)
                        fn.prepare("P" * len(launcher.pointers))
                        calls.append((fn, grid, block_dim, shared))
                    launcher.calls = calls
                row["bench_no_attr"] = bench(plain)
            for k in range(len(kernel.launches)):
                alone = [kernel.launcher(*s) for s in sets]
                for launcher in alone:
                    launcher.calls = [launcher.calls[k]]
                row[f"bench_kernel_{k}"] = bench(alone, count=1)
            row["runner_again"] = runner_times(task, kernel)
            del laid, launchers
            block.free()
            for buf in first:
                buf.free()
            out.write(json.dumps(row) + "\n")
            out.flush()
            summary = {
                k: round(statistics.median(v), 2)
                for k, v in row.items()
                if isinstance(v, list) and v and isinstance(v[0], float)
            }
            print(f"{log}: record {row['record_us']:.2f} {summary}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
