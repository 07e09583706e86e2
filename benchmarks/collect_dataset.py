"""Measure random annotated states of suite workloads on the GPU: the cost model's dataset.

    python -m benchmarks.collect_dataset --workloads matmul conv2d_bias_relu depthwise \
        --count 1000 --out dataset/

Per workload: `count` distinct states drawn by the sketch rules and init rules (sampled in parallel
processes), built and measured by the ProgramMeasurer in batches, every record appended to
`<out>/<workload>.jsonl` (records format; gzip it for tests/data/), and when each candidate was
built and run to `<out>/<workload>.timeline.jsonl` (one line per batch: `BatchEvent` fields, seconds
since the batch's measurement began). Prints per-workload figures:
sampling and measuring seconds, candidates per second, error kinds, best µs. `--compiler nvcc`
or `nvrtc` picks the builder's compiler (default: NVRTC when found), e.g. to compare throughput.
`--replay DIR` measures again the states of `DIR/<workload>.jsonl[.gz]` (in order, the first
`count`) instead of sampling new ones: a dataset re-measured under the current lowering, e.g.

    python -m benchmarks.collect_dataset --replay tests/data/costmodel --out remeasured/
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import multiprocessing
import os
import time


def _sample_chunk(job: tuple[str, int, int]) -> list[list]:
    """Step records of `n` states of `workload` sampled with `seed` (runs in a worker process)."""
    name, n, seed = job
    from autosched.compat import generate_sketches
    from autosched.sketch import SketchSampler
    from autosched.task.search_task import suite_task

    task = suite_task(name)
    sampler = SketchSampler(generate_sketches(task))
    return [[s.to_record() for s in st.steps] for st in sampler.sample(n, seed)]


def sample_states(name: str, count: int, processes: int, seed: int = 0) -> list:
    """`count` distinct complete states of suite workload `name`, sampled in `processes` workers
    with seeds from `seed` on."""
    from autosched.task.search_task import suite_task

    dag = suite_task(name).compute_dag
    seen, states = set(), []
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        while len(states) < count:
            per = max(8, (count - len(states)) // processes + 1)
            jobs = [(name, per, seed + k) for k in range(processes)]
            seed += processes
            for chunk in pool.map(_sample_chunk, jobs):
                for steps in chunk:
                    state = dag.replay_steps(steps)
                    key = state.fingerprint()
                    if key not in seen and len(states) < count:
                        seen.add(key)
                        states.append(state)
    return states


def replayed_states(name: str, directory: str, count: int) -> list:
    """The first `count` states recorded in `directory/<name>.jsonl` (or `.jsonl.gz`)."""
    import autosched
    from autosched.task.search_task import suite_task

    path = os.path.join(directory, f"{name}.jsonl")
    if not os.path.exists(path):
        path += ".gz"
    dag = suite_task(name).compute_dag
    return [dag.replay_steps(inp.steps) for inp, _ in autosched.load_records(path)][:count]


def collect(
    name: str,
    count: int,
    out: str,
    batch: int,
    processes: int,
    build_timeout: float,
    seed: int = 0,
    compiler: str = "auto",
    replay: str | None = None,
    build_parallel: int | None = None,
) -> dict:
    """Sample and measure one workload; returns its summary."""
    import autosched
    from autosched.search.program_measurer import ProgramMeasurer
    from autosched.task.search_task import suite_task
    from measure import LocalBuilder, LocalRunner, MeasureErrorKind

    task = suite_task(name)
    t0 = time.perf_counter()
    if replay:
        states = replayed_states(name, replay, count)
    else:
        states = sample_states(name, count, processes, seed)
    t1 = time.perf_counter()
    path = os.path.join(out, f"{name}.jsonl")
    builder = LocalBuilder(n_parallel=build_parallel, timeout=build_timeout, compiler=compiler)
    # a dataset's costs train cost models: every candidate timed in full, not stopped early
    measurer = ProgramMeasurer(
        task,
        builder,
        LocalRunner(),
        callbacks=[autosched.RecordToFile(path)],
        early_stop_factor=None,
    )
    kinds, best, batch_seconds = collections.Counter(), float("inf"), []
    build_run_seconds = []  # a batch's wall time less its lowering + codegen (measure/'s part)
    for k in range(0, len(states), batch):
        started, codegen = time.perf_counter(), measurer.time["codegen"]
        results = measurer.measure(states[k : k + batch])
        batch_seconds.append(round(time.perf_counter() - started, 2))
        build_run_seconds.append(round(batch_seconds[-1] - (measurer.time["codegen"] - codegen), 2))
        with open(os.path.join(out, f"{name}.timeline.jsonl"), "a") as f:
            events = [
                [round(x, 4) if isinstance(x, float) else x for x in dataclasses.astuple(e)]
                for e in measurer.context.timeline
            ]
            f.write(json.dumps({"batch": k // batch, "events": events}) + "\n")
        for r in results:
            kinds[MeasureErrorKind(r.error_kind).name] += 1
            if r.ok:
                best = min(best, r.mean_cost)
        print(
            f"  {name}: {min(k + batch, len(states))}/{len(states)} measured, "
            f"best {best * 1e6:.1f} us, {time.perf_counter() - t1:.0f} s; this batch's build + run "
            f"{build_run_seconds[-1]:.2f} s "
            f"({len(results) / build_run_seconds[-1]:.1f} candidates/s)",
            flush=True,
        )
    measurer.close()
    t2 = time.perf_counter()
    return {
        "workload": name,
        "compiler": builder.compiler_used,
        "count": len(states),
        "sample_s": t1 - t0,
        "measure_s": t2 - t1,
        "measured_per_s": len(states) / (t2 - t1),
        "error_kinds": dict(kinds),
        "best_us": best * 1e6,
        "time_split_s": dict(measurer.time),
        "batch_seconds": batch_seconds,
        "build_run_seconds": build_run_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["matmul", "conv2d_bias_relu", "depthwise"])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--processes", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--build-timeout", type=float, default=3.0)
    ap.add_argument(
        "--seed", type=int, default=0, help="first sampling seed (records are appended)"
    )
    ap.add_argument("--compiler", default="auto", choices=("auto", "nvrtc", "nvcc"))
    ap.add_argument(
        "--build-parallel",
        type=int,
        default=None,
        help="compilations at once (default: the builder's, CPU count - 1)",
    )
    ap.add_argument(
        "--replay", help="measure the states recorded in DIR/<workload>.jsonl[.gz] again"
    )
    ap.add_argument("--out", default="dataset")
    ns = ap.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    summaries = []
    for name in ns.workloads:
        summaries.append(
            collect(
                name,
                ns.count,
                ns.out,
                ns.batch,
                ns.processes,
                ns.build_timeout,
                ns.seed,
                ns.compiler,
                ns.replay,
                ns.build_parallel,
            )
        )
        print(json.dumps(summaries[-1]), flush=True)
        with open(os.path.join(ns.out, "summary.json"), "w") as f:
            json.dump(summaries, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
