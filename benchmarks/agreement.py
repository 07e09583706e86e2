"""Does re-timing a log's best the benchmarks' way give the time the search recorded? (GPU)

    python -m benchmarks.agreement --logs LOG [LOG ...] [--out rows.jsonl] [--hold-context]
    python -m benchmarks.agreement --workloads W [W ...] --trials 16 [--out rows.jsonl]

For each record log's best (or the best of a short random search of each suite workload, logged
to a temporary folder), in this process: the search's runner reads it again (`runner_us`, the
mean of its repeats, as a record is kept; its own worker process and context, as in a search),
then the benchmarks' method times it (`bench_us`: timing.time_graph over launchers of
rotated torch buffer sets, as many as the runner cycles through). One JSON line each, with the
log's `record_us` and the kernel count.

This process touches CUDA only after the runner's reading, as `benchmarks.run` does with one
workload; `--hold-context` makes it hold a PyTorch context (with side-stream launches) while the
runner reads, as a process that tunes beside its model does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile


def best_of(log: str):
    """(task, BuiltKernel, recorded seconds) of a record log's best record."""
    import autosched
    from autosched.records import load_best
    from autosched.task.search_task import suite_task
    from autosched.task.workloads import SUITE

    best = load_best(log)
    if best is None:
        raise ValueError(f"{log}: no correct record")
    inp, res = best
    by_key = {suite_task(name).workload_key: name for name in SUITE}
    if inp.workload_key not in by_key:
        raise ValueError(f"{log}: its best is not a suite workload")
    task = suite_task(by_key[inp.workload_key])
    dag = task.compute_dag
    return task, autosched.build(dag, dag.replay_steps(inp.steps)), res.mean_cost


def short_search(name: str, trials: int, folder: str, seed: int = 0) -> str:
    """A random search of `trials` states of suite workload `name`; the path of its log."""
    import autosched
    from autosched.search.policy import SearchParams, SketchPolicy
    from autosched.task.search_task import suite_task
    from measure import LocalBuilder, LocalRunner

    task = suite_task(name)
    log = os.path.join(folder, f"{name}.json")
    params = SearchParams(
        population=32, generations=1, sample_init_min_population=trials, n_jobs=1, seed=seed
    )
    runner = LocalRunner()
    options = autosched.TuningOptions(
        num_measure_trials=trials,
        num_measures_per_round=trials,
        builder=LocalBuilder(timeout=60.0),
        runner=runner,
        measure_callbacks=[autosched.RecordToFile(log)],
        verbose=0,
    )
    try:
        policy = SketchPolicy(task, autosched.RandomModel(), params, verbose=0)
        autosched.auto_schedule(task, policy, options)
    finally:
        runner.close()
    if runner.back_to_back_timings:
        raise RuntimeError(f"{name}: the runner did not time by graph replay")
    return log


def runner_reading(task, kernel) -> float:
    """Seconds per run of `kernel` as the search's runner records it (a fresh runner)."""
    from autosched.search.program_measurer import task_reference
    from measure import LocalBuilder, LocalMeasureContext, LocalRunner

    ref = task_reference(task, kernel.args)
    with LocalMeasureContext(LocalBuilder(timeout=60.0), LocalRunner()) as ctx:
        (result,) = ctx.measure_batch([kernel.artifact(reference_id="ref")], {"ref": ref})
    if not result.costs:
        raise RuntimeError(f"the runner did not time it: {result.error_msg}")
    return statistics.mean(result.costs)


def bench_reading(kernel) -> float:
    """Seconds per run of `kernel` timed as the benchmarks time ours (timing)."""
    import torch

    from benchmarks.timing import kernel_rotation_copies, shared_stream, time_graph

    temps = {b.name for b in kernel.program.temps}

    def buffer_set():
        return [
            (torch.rand if not a.is_output else torch.empty)(
                a.shape, dtype=getattr(torch, a.dtype), device="cuda"
            )
            for a in kernel.args
            if a.name not in temps
        ]

    launchers = [kernel.launcher(*buffer_set()) for _ in range(kernel_rotation_copies(kernel))]
    ours, stream = shared_stream()
    return time_graph([lambda launch=launch: launch(ours) for launch in launchers], stream=stream)


def hold_context() -> None:
    """Make this process's PyTorch context and launch on a side stream in it."""
    import torch

    from benchmarks.timing import settle_launch_state

    torch.zeros(1, device="cuda")
    settle_launch_state()


def agreement_rows(logs: list[str], hold: bool = False) -> list[dict]:
    """One row per log: its record, the runner's reading again and the benchmark's, in µs. The
    runner reads every best before this process touches CUDA (unless `hold`)."""
    if hold:
        hold_context()
    bests = [best_of(log) for log in logs]
    runner = [runner_reading(task, kernel) for task, kernel, _ in bests]
    rows = []
    for log, (task, kernel, recorded), again in zip(logs, bests, runner, strict=True):
        rows.append(
            {
                "log": log,
                "workload": task.workload_key,
                "kernels": len(kernel.launches),
                "record_us": recorded * 1e6,
                "runner_us": again * 1e6,
                "bench_us": bench_reading(kernel) * 1e6,
                "hold_context": hold,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", nargs="*", default=[])
    ap.add_argument("--workloads", nargs="*", default=[])
    ap.add_argument("--trials", type=int, default=16, help="per workload, with --workloads")
    ap.add_argument("--hold-context", action="store_true")
    ap.add_argument("--out", default=None, help="append the rows here (JSON lines)")
    ns = ap.parse_args(argv)
    if not ns.logs and not ns.workloads:
        ap.error("give --logs or --workloads")
    with tempfile.TemporaryDirectory() as folder:
        logs = list(ns.logs)
        try:
            for name in ns.workloads:
                logs.append(short_search(name, ns.trials, folder))
            rows = agreement_rows(logs, ns.hold_context)
        except (OSError, ValueError, KeyError) as err:
            print(f"agreement: {err}", file=sys.stderr)
            return 2
    for row in rows:
        line = json.dumps(row)
        print(line, flush=True)
        if ns.out:
            with open(ns.out, "a") as out:
                out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
