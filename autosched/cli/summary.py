"""What `tune` and `resume` print at the end: best cost, time split, schedule, source file."""

from __future__ import annotations

import os


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


def print_summary(task, res, log: str) -> None:
    """Print the best result of a search and write its CUDA source beside the log."""
    state, cost, kernel = res.state, res.best_cost, res.kernel
    src = _source_path(log)
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


def _source_path(log: str) -> str:
    """`x.json` -> `x.cu`, `x.json.gz` -> `x.cu`."""
    root = log[: -len(".gz")] if log.endswith(".gz") else log
    return os.path.splitext(root)[0] + ".cu"
