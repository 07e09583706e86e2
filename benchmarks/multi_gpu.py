"""Measuring on every GPU of a host against one GPU: throughput, agreement, whole-model tuning.

    python -m benchmarks.multi_gpu --out runs/ [--dask] [--count 320] [--publish]

On a GPU machine that cannot download, first stage the `distributed` extra here
(`bash benchmarks/stage_distributed.sh`), carry `.gpu`, and there:

    source .gpu/env.sh && python3 -m pip install -q --no-index --no-deps --upgrade \
        --target /tmp/site .gpu/wheels-distributed/*.whl && \
        python3 -m benchmarks.multi_gpu --out "$OUT" --dask

Sections (each one's figures, or its error, go to OUT/multi_gpu/results.json and its table to
results.md as soon as it ends; with `--publish`, to benchmarks/results/multi_gpu/ as well):
- `throughput_1gpu` / `throughput_all`: `count` distinct random conv2d_bias_relu states (the
  suite's conv2d) measured by the ProgramMeasurer in batches of `batch`, on device 0 alone and
  then on every visible device (one runner per GPU, the builder shared), after one warm-up
  batch each: candidates per second, end to end and build + run only (less lowering).
- `run_only`: the same kernels built once, then only run: how the runners alone scale.
- `agreement`: correct kernels timed on every device in turn (three passes, median): the
  largest relative difference between devices, which must stay within 3%.
- `dask` (with `--dask`): the throughput again through a local Dask cluster, one worker per GPU
  (`local_dask.gpu_cluster`; needs the `distributed` extra).
- `model_1gpu` / `model_all`: a short whole-model tuning (`--model`, `--model-trials` or
  `--model-minutes`) on device 0 alone, then on all devices (as many tasks in flight as
  `tune_model.default_parallel_tasks` gives): tuning seconds, trials per second and the
  estimated end-to-end latency. With `--skip-measure` only these two run.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
import traceback

from benchmarks import report
from benchmarks.report import (
    Column,
    Results,
    Table,
    command_line,
    git_commit,
    machine,
    write_results,
)

WORKLOAD = "conv2d_bias_relu"


def devices_info() -> dict:
    from measure import gpu_available, visible_devices

    devices = visible_devices()
    names = {d: gpu_available(d)[1] for d in devices}
    return {"devices": devices, "names": names, "cpu_count": os.cpu_count()}


def throughput(states, runner, batch: int, label: str, context=None) -> dict:
    """Measure `states` in batches (the first batch a warm-up, not counted)."""
    from autosched.search.program_measurer import ProgramMeasurer
    from autosched.task.search_task import suite_task
    from measure import LocalBuilder, MeasureErrorKind

    task = suite_task(WORKLOAD)
    if context is None:
        measurer = ProgramMeasurer(task, LocalBuilder(), runner)
    else:
        measurer = ProgramMeasurer(task, context=context)
    kinds: collections.Counter = collections.Counter()
    walls, build_runs = [], []
    try:
        measurer.measure(states[:batch])  # warm-up: compiler workers, runner processes
        for k in range(batch, len(states), batch):
            t0, codegen = time.perf_counter(), measurer.time["codegen"]
            results = measurer.measure(states[k : k + batch])
            walls.append(time.perf_counter() - t0)
            build_runs.append(walls[-1] - (measurer.time["codegen"] - codegen))
            kinds.update(MeasureErrorKind(r.error_kind).name for r in results)
            n = len(results)
            print(
                f"  {label}: batch of {n}: {n / walls[-1]:.1f} candidates/s "
                f"({n / build_runs[-1]:.1f} build + run only)",
                flush=True,
            )
        runner = getattr(measurer.context, "runner", None)  # a Dask context has none here
        per_runner = list(getattr(runner, "per_runner", None) or [])
    finally:
        measurer.close()
    n = len(states) - batch
    return {
        "candidates": n,
        "per_s": n / sum(walls),
        "build_run_per_s": n / sum(build_runs),
        "batch_seconds": [round(w, 2) for w in walls],
        "error_kinds": dict(kinds),
        "per_runner": per_runner,
    }


def built_kernels(states):
    """(artifacts, builds, references) of the states, built once."""
    from autosched.search.program_measurer import _local_workers, task_reference
    from autosched.task.search_task import suite_task
    from measure import LocalBuilder

    task = suite_task(WORKLOAD)
    made = _local_workers(task).build([s.key() for s in states], [s.fingerprint() for s in states])
    artifacts = [a for a in made if not isinstance(a, str)]
    refs = {task.workload_key: task_reference(task, artifacts[0].args)}
    with LocalBuilder() as builder:
        builds = builder.build(artifacts)
    keep = [i for i, b in enumerate(builds) if b.ok]
    return [artifacts[i] for i in keep], [builds[i] for i in keep], refs


def run_only(kernels, devices: list[int]) -> dict:
    from measure import LocalRunner, RunnerPool

    artifacts, builds, refs = kernels
    out = {"kernels": len(artifacts)}
    for label, runner in (
        ("1gpu", LocalRunner(device=devices[0])),
        ("all", RunnerPool.for_devices(devices)),
    ):
        with runner:
            runner.run(artifacts[:4], builds[:4], refs)  # start the workers, send the reference
            t0 = time.perf_counter()
            results = runner.run(artifacts, builds, refs)
            wall = time.perf_counter() - t0
        out[f"{label}_per_s"] = len(results) / wall
        out[f"{label}_ok"] = sum(r.mean_cost < float("inf") for r in results)
        print(f"  run only, {label}: {len(results) / wall:.1f} kernels/s", flush=True)
    out["speedup"] = out["all_per_s"] / out["1gpu_per_s"]
    return out


def agreement(kernels, devices: list[int], most: int = 8) -> dict:
    """Each correct kernel timed on every device, three passes; medians compared."""
    from measure import RunnerPool

    artifacts, builds, refs = kernels
    rows = []
    with RunnerPool.for_devices(devices) as pool:
        for art, build in list(zip(artifacts, builds, strict=True))[:most]:
            passes = [pool.time_on_each(art, build, refs) for _ in range(3)]
            if any(r.mean_cost == float("inf") for p in passes for r in p):
                continue
            medians = [
                statistics.median(p[d].mean_cost for p in passes) for d in range(len(devices))
            ]
            diff = max(medians) / min(medians) - 1
            rows.append({"us": [round(m * 1e6, 3) for m in medians], "rel_diff": round(diff, 4)})
            print(f"  agreement: {rows[-1]['us']} us, {diff * 100:.2f}% apart", flush=True)
        device_name = pool.device_name
    worst = max((r["rel_diff"] for r in rows), default=None)
    return {
        "device": device_name,
        "kernels": rows,
        "max_rel_diff": worst,
        "within_3pct": worst is not None and worst <= 0.03,
    }


def dask_throughput(states, devices: list[int], batch: int) -> dict:
    from autosched.search.distributed import DaskMeasureContext
    from benchmarks.local_dask import gpu_cluster

    share = max(1, ((os.cpu_count() or 2) - 1) // len(devices))
    with gpu_cluster(devices) as address:
        context = DaskMeasureContext(address, builder_options={"n_parallel": share})
        try:
            figures = throughput(states, None, batch, "dask", context=context)
        finally:
            context.close()
    figures["builder_n_parallel_per_worker"] = share
    return figures


def model_tuning(
    model: str,
    batch: int,
    budget: tuple[int | None, float | None],
    per_round: int,
    parallel: int | None,
    devices,
    out: str,
    label: str,
) -> dict:
    """A whole-model tuning on `devices` within `budget` (trials, seconds) with `parallel`
    tasks' rounds in flight (None: two per GPU and five more): its trials per second and estimated
    latency."""
    import autosched.torch as at
    from autosched.search.policy import SearchParams
    from autosched.search.tune_model import tune_tasks
    from benchmarks.model_zoo import MODELS

    net, inputs = MODELS[model].build(batch)
    tasks = at.extract_tasks(net, inputs)
    search_tasks, weights = at.tasks_and_weights(tasks)
    log = os.path.join(out, f"{model}_{label}.log.json")
    if os.path.exists(log):
        os.remove(log)
    trials, seconds = budget
    t0 = time.perf_counter()
    result = tune_tasks(
        search_tasks,
        weights,
        log,
        trials,
        time_budget_s=seconds,
        num_measures_per_round=per_round,
        search_params=SearchParams(n_jobs=os.cpu_count() or 1),
        devices=devices,
        parallel_tasks=parallel,
    )
    return {
        "model": model,
        "parallel_tasks": parallel,
        "batch": batch,
        "tasks": len(search_tasks),
        "tasks_tuned": len(search_tasks) - len(result.fallback_tasks),
        "devices": devices,
        "tuning_s": time.perf_counter() - t0,
        "trials": result.trials,
        "trials_per_s": result.trials_per_s,
        "estimated_latency_us": result.latency * 1e6,
        "rounds": len(result.history),
    }


COLUMNS = [
    Column("measurement"),
    Column("one GPU", "{:.1f}"),
    Column("all GPUs", "{:.1f}"),
    Column("all / one", "{:.2f}"),
]


def multi_gpu_results(figures: dict, where: dict) -> Results:
    """The multi_gpu folder's document: one GPU against all, from the sections' figures (a
    section that failed leaves its rows out and says so in the note)."""
    rows: list[list] = []

    def pair(label: str, one: float | None, every: float | None) -> None:
        ratio = every / one if one and every is not None else None
        rows.append([label, one, every, ratio])

    one, every = figures.get("throughput_1gpu", {}), figures.get("throughput_all", {})
    if "per_s" in one and "per_s" in every:
        batch = figures["batch"]
        pair(f"{WORKLOAD}, candidates/s (batches of {batch})", one["per_s"], every["per_s"])
        pair("the same, build + run only", one["build_run_per_s"], every["build_run_per_s"])
    if "speedup" in figures.get("run_only", {}):
        ro = figures["run_only"]
        pair("kernels built once, run only: kernels/s", ro["1gpu_per_s"], ro["all_per_s"])
    if "per_s" in figures.get("dask", {}):
        pair("through Dask, one worker per GPU: candidates/s", None, figures["dask"]["per_s"])
    if "max_rel_diff" in figures.get("agreement", {}):
        diff = (figures["agreement"]["max_rel_diff"] or 0) * 100
        pair("same kernels on each GPU: most apart, %", None, diff)
    m1, ma = figures.get("model_1gpu", {}), figures.get("model_all", {})
    if "tuning_s" in m1 and "tuning_s" in ma:
        name = f"{m1['model']} ({m1['tasks']} tasks)"
        pair(f"{name}: tuning s", m1["tuning_s"], ma["tuning_s"])
        pair(f"{name}: trials", sum(m1["trials"]), sum(ma["trials"]))
        if "trials_per_s" in m1 and "trials_per_s" in ma:
            pair(f"{name}: trials/s", m1["trials_per_s"], ma["trials_per_s"])
        pair(f"{name}: estimated µs", m1["estimated_latency_us"], ma["estimated_latency_us"])
    failed = [
        f"{key} failed: {value['error']}"
        for key, value in figures.items()
        if isinstance(value, dict) and "error" in value
    ]
    note = "One runner process per GPU; the builder (the host's compiler workers) is shared."
    if failed:
        note += " " + "; ".join(failed) + "."
    table = Table(
        "Measuring on one GPU against all of the host's",
        where["machine"],
        where["commit"],
        where["command"],
        COLUMNS,
        rows,
        note,
    )
    return Results("multi_gpu", "Several GPUs", [table], [figures])


def measure_sections(ns, devices: list[int], section) -> None:
    """The sections that measure sampled states: throughput, run only, agreement, Dask."""
    from benchmarks.collect_dataset import sample_states
    from measure import LocalRunner, local_runner

    states = sample_states(WORKLOAD, ns.count + ns.batch, min(8, os.cpu_count() or 1))
    section(
        "throughput_1gpu", throughput, states, LocalRunner(device=devices[0]), ns.batch, "1 GPU"
    )
    section("throughput_all", throughput, states, local_runner(devices), ns.batch, "all GPUs")
    kernels = None
    try:
        kernels = built_kernels(states[: min(len(states), 2 * ns.batch)])
    except Exception:
        traceback.print_exc()
    if kernels is not None and len(devices) > 1:
        section("run_only", run_only, kernels, devices)
        section("agreement", agreement, kernels, devices)
    if ns.dask:
        section("dask", dask_throughput, states, devices, ns.batch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="logs; the table goes to OUT/multi_gpu/")
    ap.add_argument(
        "--publish",
        action="store_true",
        help="also write the table to benchmarks/results/multi_gpu/ and docs/PERFORMANCE.md",
    )
    ap.add_argument("--count", type=int, default=320, help="states measured per configuration")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dask", action="store_true", help="also measure through a Dask cluster")
    ap.add_argument("--model", default="resnet18", help="model of benchmarks/model_zoo.py")
    ap.add_argument("--model-batch", type=int, default=1)
    ap.add_argument("--model-trials", type=int, default=384, help="0: skip model tuning")
    ap.add_argument(
        "--model-minutes",
        type=float,
        default=None,
        help="a time budget for each model tuning instead of --model-trials (its warm-up rounds "
        "are then sized from each run's own rate, so one GPU and all GPUs tune in rounds of "
        "different sizes: compare trials/s under --model-trials)",
    )
    ap.add_argument("--model-per-round", type=int, default=16)
    ap.add_argument(
        "--model-parallel",
        type=int,
        default=None,
        help="tasks' rounds in flight at once (default: two per GPU used and five more)",
    )
    ap.add_argument(
        "--skip-measure",
        action="store_true",
        help="only the model tunings (no throughput, run-only or agreement sections)",
    )
    ns = ap.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    figures: dict = {"batch": ns.batch, "count": ns.count}
    where = {
        "machine": machine(),
        "commit": git_commit(),
        "command": command_line("benchmarks.multi_gpu", sys.argv[1:] if argv is None else argv),
    }

    def section(name: str, fn, *args) -> None:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            figures[name] = fn(*args)
        except Exception as exc:
            traceback.print_exc()
            figures[name] = {"error": f"{type(exc).__name__}: {exc}"}
        figures[name]["section_s"] = round(time.perf_counter() - t0, 1)
        # rewritten after each section, so that a run cut short keeps what it measured
        write_results(multi_gpu_results(figures, where), root=ns.out)

    section("info", devices_info)
    devices = figures["info"].get("devices") or [0]
    if len(devices) < 2:
        print(f"only {len(devices)} GPU visible: the all-GPU figures equal the one-GPU ones")
    if not ns.skip_measure:
        measure_sections(ns, devices, section)
    if ns.model_trials > 0 or ns.model_minutes is not None:
        budget = (
            (None, 60.0 * ns.model_minutes)
            if ns.model_minutes is not None
            else (ns.model_trials, None)
        )
        args = (ns.model, ns.model_batch, budget, ns.model_per_round, ns.model_parallel)
        section("model_1gpu", model_tuning, *args, devices[:1], ns.out, "1gpu")
        section("model_all", model_tuning, *args, devices, ns.out, "all")
    report.finish(multi_gpu_results(figures, where), ns.publish)
    return 0


if __name__ == "__main__":
    sys.exit(main())
