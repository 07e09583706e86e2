"""What `tune` and `resume` print at the end: best cost, time split, schedule, source file."""

from __future__ import annotations

import os


def time_split(history: list[dict]) -> str:
    """Two lines: the rounds' seconds spent in search / build / run / model (which overlap in a
    pipelined loop), and the wall-clock time split by what the loop waited on, with trials/s
    and how busy the GPU was (`search.progress`)."""
    if not history:
        return "no rounds"
    total = {k: sum(r[f"{k}_s"] for r in history) for k in ("search", "build", "run", "model")}
    per_round = total["search"] / len(history)
    wall = sum(r["wall_s"] for r in history)
    split = {k: sum(r["split_s"][k] for r in history) for k in ("search", "build", "gpu", "idle")}
    rate, busy = (history[-1]["trials"] / wall, split["gpu"] / wall) if wall > 0 else (0.0, 0.0)
    return (
        f"{len(history)} rounds: search {total['search']:.1f} s ({per_round:.2f} s a round), "
        f"build {total['build']:.1f} s, run {total['run']:.1f} s, model {total['model']:.1f} s\n"
        f"wall {wall:.1f} s: GPU {split['gpu']:.1f} s, compilation {split['build']:.1f} s, "
        f"search {split['search']:.1f} s, idle {split['idle']:.1f} s "
        f"({rate:.1f} trials/s, GPU busy {busy:.0%})"
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
