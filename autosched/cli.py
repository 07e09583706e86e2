"""The `autosched` command line: tune, resume, show, curve."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys

from autosched.errors import AutoschedError


def _task_from_name(workload: str, args: list[str], full: bool = True):
    from autosched.task.search_task import SearchTask, suite_task
    from autosched.task.workloads import SUITE

    if workload in SUITE:
        return suite_task(workload, reduced=not full)
    if ":" in workload:
        module, _, fn = workload.partition(":")
        func = getattr(importlib.import_module(module), fn)
        parsed = [json.loads(a) for a in args]
        return SearchTask(func, tuple(parsed))
    raise AutoschedError(
        f"unknown workload {workload!r}; suite workloads: {', '.join(SUITE)}, "
        "or module:function followed by its arguments"
    )


def _check_gpu_tools() -> None:
    from measure import gpu_available

    if shutil.which("nvcc") is None:
        raise AutoschedError("tuning needs nvcc (the CUDA toolkit) on PATH, and it was not found")
    ok, reason = gpu_available()
    if not ok:
        raise AutoschedError(
            f"tuning needs a CUDA GPU with pycuda ('pip install autosched[cuda]'): {reason}"
        )


def time_split(history: list[dict]) -> str:
    """One line: the rounds' wall-clock seconds spent in search / build / run / model."""
    if not history:
        return "no rounds"
    total = {k: sum(r[f"{k}_s"] for r in history) for k in ("search", "build", "run", "model")}
    per_round = total["search"] / len(history)
    return (
        f"{len(history)} rounds: search {total['search']:.1f} s ({per_round:.2f} s a round), "
        f"build {total['build']:.1f} s, run {total['run']:.1f} s, model {total['model']:.1f} s"
    )


def _summary(task, res, log: str) -> None:
    state, cost, kernel = res.state, res.best_cost, res.kernel
    src = os.path.splitext(log)[0] + ".cu"
    with open(src, "w") as f:
        f.write(kernel.source)
    flop = task.compute_dag.flop_count
    print(
        f"\nbest: {cost * 1e6:.2f} us  ({flop / cost / 1e9:.1f} GFLOP/s)  task {task.workload_key}"
    )
    print(f"time: {time_split(res.history)}")
    print("\nEquivalent python schedule:")
    print(task.compute_dag.print_python_schedule(state))
    print(f"CUDA source written to {src}")


def cmd_tune(ns) -> int:
    from autosched.records import RecordToFile
    from autosched.search.auto_schedule import TuningOptions, auto_schedule
    from autosched.search.policy import SearchParams, SketchPolicy

    _check_gpu_tools()
    task = _task_from_name(ns.workload, ns.args)
    log = ns.log or f"{ns.workload.replace(':', '_')}.json"
    opts = TuningOptions(
        num_measure_trials=ns.trials,
        num_measures_per_round=ns.per_round,
        measure_callbacks=[RecordToFile(log)],
        verbose=1,
    )
    print(
        f"tuning {task.workload_key}: {task.compute_dag.flop_count / 1e9:.3f} GFLOP, {ns.trials} trials, log {log}"
    )
    policy = SketchPolicy(task, params=SearchParams(n_jobs=ns.n_jobs))
    res = auto_schedule(task, policy, opts)
    _summary(task, res, log)
    return 0


def cmd_resume(ns) -> int:
    from autosched.records import RecordToFile, load_records
    from autosched.search.auto_schedule import TuningOptions, auto_schedule
    from autosched.search.cost_model import XGBModel
    from autosched.search.policy import PreloadMeasuredStates, SearchParams, SketchPolicy
    from autosched.search.workers import resolve_n_jobs
    from autosched.task.search_task import SearchTask

    _check_gpu_tools()
    keys = []
    for inp, _ in load_records(ns.log):
        if inp.workload_key not in keys:
            keys.append(inp.workload_key)
    if not keys:
        raise AutoschedError(f"{ns.log} holds no records to resume from")
    task = SearchTask(workload_key=keys[-1])
    model = XGBModel(nthread=1)
    n = model.update_from_file(ns.log, n_jobs=resolve_n_jobs(ns.n_jobs))  # before the first round
    print(f"resuming {task.workload_key}: model trained on {n} records")
    policy = SketchPolicy(
        task,
        model,
        SearchParams(n_jobs=ns.n_jobs),
        init_search_callbacks=[PreloadMeasuredStates(ns.log)],
    )
    opts = TuningOptions(
        num_measure_trials=ns.trials,
        num_measures_per_round=ns.per_round,
        measure_callbacks=[RecordToFile(ns.log)],
    )
    res = auto_schedule(task, policy, opts)
    _summary(task, res, ns.log)
    return 0


def cmd_show(ns) -> int:
    from autosched.records import load_records
    from autosched.task.search_task import SearchTask

    best: dict[str, tuple] = {}
    counts: dict[str, int] = {}
    for inp, res in load_records(ns.log):
        counts[inp.workload_key] = counts.get(inp.workload_key, 0) + 1
        if res.ok and (
            inp.workload_key not in best or res.mean_cost < best[inp.workload_key][1].mean_cost
        ):
            best[inp.workload_key] = (inp, res)
    for key, n in counts.items():
        print(f"task {key}: {n} records")
        if key not in best:
            print("  no correct measurement")
            continue
        inp, res = best[key]
        task = SearchTask(workload_key=key)
        state = task.compute_dag.replay_steps(inp.steps)
        flop = task.compute_dag.flop_count
        print(f"  best {res.mean_cost * 1e6:.2f} us ({flop / res.mean_cost / 1e9:.1f} GFLOP/s)\n")
        print(task.compute_dag.print_python_schedule(state))
        if ns.source:
            from autosched.codegen.build import build

            print(build(task.compute_dag, state).source)
    return 0


def cmd_curve(ns) -> int:
    from autosched.records import load_records
    from autosched.task.search_task import SearchTask

    flops, series = {}, {}
    for inp, res in load_records(ns.log):
        key = inp.workload_key
        if key not in flops:
            flops[key] = SearchTask(workload_key=key).compute_dag.flop_count
            series[key] = []
        prev = series[key][-1] if series[key] else 0.0
        g = flops[key] / res.mean_cost / 1e9 if res.ok else 0.0
        series[key].append(max(prev, g))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AutoschedError(
            "`autosched curve` needs matplotlib: pip install 'autosched[plot]'"
        ) from None
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, ys in series.items():
        ax.plot(range(1, len(ys) + 1), ys, label=key)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s so far")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(ns.output, dpi=120)
    print(f"wrote {ns.output}")
    return 0


def cmd_dag(ns) -> int:
    task = _task_from_name(ns.workload, ns.args)
    print(f"workload key: {task.workload_key}\nFLOPs: {task.compute_dag.flop_count:.0f}\n")
    print(task.compute_dag)
    from autosched.sketch import generate_sketches

    for i, s in enumerate(generate_sketches(task.compute_dag, hardware=task.hardware_params)):
        print(f"--- sketch {i} ---")
        print(task.compute_dag.print_python_schedule(s))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="autosched", description="Template-free auto-scheduler for CUDA"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune", help="tune a workload on the GPU")
    t.add_argument("workload")
    t.add_argument("args", nargs="*", help="arguments of a module:function workload (JSON values)")
    t.add_argument("--trials", type=int, default=200)
    t.add_argument("--log")
    t.add_argument("--per-round", type=int, default=64)
    t.add_argument(
        "--n-jobs", type=int, default=None, help="search worker processes (default: one per core)"
    )
    t.set_defaults(fn=cmd_tune)
    r = sub.add_parser("resume", help="continue a search from its log")
    r.add_argument("log")
    r.add_argument("--trials", type=int, default=64)
    r.add_argument("--per-round", type=int, default=64)
    r.add_argument(
        "--n-jobs", type=int, default=None, help="search worker processes (default: one per core)"
    )
    r.set_defaults(fn=cmd_resume)
    s = sub.add_parser("show", help="best record per task: schedule (and source)")
    s.add_argument("log")
    s.add_argument("--source", action="store_true")
    s.set_defaults(fn=cmd_show)
    c = sub.add_parser("curve", help="plot best GFLOP/s over trials")
    c.add_argument("log")
    c.add_argument("-o", "--output", default="curve.png")
    c.set_defaults(fn=cmd_curve)
    d = sub.add_parser("dag", help="print a workload's DAG and sketches (no GPU needed)")
    d.add_argument("workload")
    d.add_argument("args", nargs="*")
    d.set_defaults(fn=cmd_dag)
    ns = p.parse_args(argv)
    try:
        return ns.fn(ns)
    except AutoschedError as exc:
        print(f"autosched: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
