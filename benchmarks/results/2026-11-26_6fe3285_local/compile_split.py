"""How long split-K states of conv2d_bias_relu take to compile, with the reduction axes fused
before the cut (the default) or the input channels cut alone (`split_k_outer_axis`). CPU only.

    python3 benchmarks/results/2026-11-26_6fe3285_local/compile_split.py N PARTS

Samples N states of the PARTS-way split sketch of the full-size task each way (the search's
sampler, seed 0), builds each as users get it and compiles it with NVRTC for sm_90, one at a
time (no other build running), 20 s at most. Prints per state the seconds and the estimated
compiled statements of its largest kernel, and per variant the median and how many passed 3 s
(the search's limit, on a GPU machine building 16 at once).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def main(n: int, parts: int) -> None:
    import autosched
    from autosched.lower.unrolling import compiled_statements
    from autosched.sketch import SketchParams, SketchSampler, generate_sketches
    from autosched.task.search_task import suite_task
    from measure.compiler import compile_kernel

    task = suite_task("conv2d_bias_relu")
    dag = task.compute_dag
    for outer in (False, True):
        params = dataclasses.replace(SketchParams.for_task(task), split_k_outer_axis=outer)
        sketches = [
            s
            for s in generate_sketches(dag, task.hardware_params, params)
            if any(st.op.name.endswith(".rf") and st.op.axis[0].extent == parts for st in s.stages)
        ]
        sampler = SketchSampler(sketches, task.hardware_params, params)
        seconds = []
        for state in sampler.sample(n, 0):
            kernel = autosched.build(dag, state)
            statements = max(compiled_statements(k.body) for k in kernel.program.kernels)
            t0 = time.perf_counter()
            kind, message, _, _ = compile_kernel(kernel.source, "sm_90", timeout=20.0)
            took = time.perf_counter() - t0
            seconds.append(took)
            print(f"outer_axis={outer} {took:6.2f} s {statements:5d} statements {kind.name}")
        over = sum(s > 3.0 for s in seconds)
        print(
            f"## outer_axis={outer}: {len(seconds)} states, median {statistics.median(seconds):.2f}"
            f" s, {over} over 3 s, slowest {max(seconds):.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
