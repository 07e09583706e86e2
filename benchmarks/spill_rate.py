"""How many sampled states spill registers: compile random states with ptxas, no GPU needed.

    python3 benchmarks/spill_rate.py --count 40 --seed 0 [--workloads conv2d_bias_relu ...]
        [--sketch max_local_elems=64]

Per suite workload, `count` states drawn by the sketch and init rules are generated as CUDA and
compiled for sm_90 by the builder (NVRTC when found, else nvcc; `max_local_memory_spill_bytes`
raised so that nothing is rejected for spilling); prints per workload how many spill, with their
registers, threads and spill bytes, and the total. `--json PATH` writes the per-state rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from run import sketch_param  # noqa: E402


def sampled_artifacts(name: str, count: int, seed: int, sketch: dict | None = None):
    """(state, artifact) of `count` states of suite workload `name`; `sketch`: SketchParams
    fields by name over the task's own."""
    import dataclasses

    from autosched.codegen.build import build
    from autosched.sketch import SketchParams, SketchSampler, generate_sketches
    from autosched.task.search_task import suite_task

    task = suite_task(name)
    params = dataclasses.replace(SketchParams.for_task(task), **(sketch or {}))
    hardware = task.hardware_params
    sampler = SketchSampler(generate_sketches(task.compute_dag, hardware, params), hardware, params)
    states = sampler.sample(count, seed)
    return [(s, build(task.compute_dag, s).artifact(tag=name)) for s in states]


def spill_builder(compiler: str = "auto", timeout: float = 30):
    """A LocalBuilder for sm_90 on every core whose spill limit rejects nothing, so that a
    spilling kernel is reported, not refused."""
    from measure import LocalBuilder
    from measure.hardware import HardwareParams

    hardware = HardwareParams(max_local_memory_spill_bytes=1 << 30)
    return LocalBuilder(
        hardware=hardware,
        arch="sm_90",
        compiler=compiler,
        timeout=timeout,
        n_parallel=os.cpu_count(),
    )


def compile_report(res) -> dict:
    """A build result's error kind, most registers of its kernels and their total spill bytes."""
    kernels = list(res.kernels.values())
    return {
        "error": res.error_kind.name,
        "registers": max((k.registers for k in kernels), default=0),
        "spill_bytes": sum(k.spill_bytes for k in kernels),
    }


def spill_rows(names, count: int, seed: int, compiler: str = "auto", sketch: dict | None = None):
    """One dict per compiled state: workload, index, registers, threads, spill bytes, error."""
    rows = []
    with spill_builder(compiler) as builder:
        for name in names:
            pairs = sampled_artifacts(name, count, seed, sketch)
            results = builder.build([a for _, a in pairs])
            for k, ((_, artifact), res) in enumerate(zip(pairs, results, strict=True)):
                rows.append(
                    {
                        "workload": name,
                        "index": k,
                        **compile_report(res),
                        "threads": max(launch.threads_per_block for launch in artifact.launches),
                        "compile_s": round(res.build_seconds, 3),
                    }
                )
    return rows, builder.compiler_used


def main(argv: list[str] | None = None) -> int:
    from autosched.task.workloads import SUITE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="*", default=list(SUITE))
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compiler", default="auto", choices=("auto", "nvrtc", "nvcc"))
    parser.add_argument("--json", help="write the per-state rows here")
    parser.add_argument(
        "--sketch",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=sketch_param,
        help="set a SketchParams field of the sampling, as benchmarks/run.py --sketch does",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows, compiler = spill_rows(
        args.workloads, args.count, args.seed, args.compiler, dict(args.sketch)
    )
    total = spilled_total = 0
    for name in args.workloads:
        mine = [r for r in rows if r["workload"] == name and r["error"] == "NO_ERROR"]
        spilled = [r for r in mine if r["spill_bytes"]]
        total, spilled_total = total + len(mine), spilled_total + len(spilled)
        detail = ", ".join(
            f"#{r['index']} {r['registers']}r x{r['threads']} {r['spill_bytes']}B" for r in spilled
        )
        print(f"{name:18s} {len(spilled):3d} of {len(mine):3d} spill  {detail}")
    print(
        f"total: {spilled_total} of {total} compiled states spill "
        f"({100 * spilled_total / max(1, total):.1f}%), {compiler}, "
        f"{time.perf_counter() - started:.0f} s"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
