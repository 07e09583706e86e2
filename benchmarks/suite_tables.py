"""The operator suite's published tables (`benchmarks/results/operators/`), built from the runs
`benchmarks.run` measures: one row per (workload, seed, trials) with the GPU times of ours and
PyTorch's (`benchmarks.run.row`), plus the machine and commit it ran on.

Runs of one trial count make one table: with one seed per workload, every figure of each run;
with several, each seed's time and the spread between them.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
from collections import defaultdict

from benchmarks.report import Column, Results, Table

TITLE = "Operators against PyTorch (fp32)"

SINGLE_NOTE = (
    "autosched: our best kernel; the search's record / runner again: the search's own reading of"
    " it and a fresh runner's just before the benchmark; eager: CUDA events around 100"
    " back-to-back calls (for small operators, host dispatch). TF32: PyTorch with TF32 allowed;"
    " our fp32 kernels use the CUDA cores."
)
SINGLE_COLUMNS = [
    Column("workload"),
    Column("GFLOP", "{:.3f}"),
    Column("autosched µs", "{:.1f}"),
    Column("search's record / runner again µs"),
    Column("torch fp32 µs", "{:.1f}"),
    Column("torch TF32 µs", "{:.1f}"),
    Column("eager µs: ours / fp32 / TF32"),
    Column("ours/fp32", "{:.2f}"),
    Column("GFLOP/s", "{:.0f}"),
    Column("% fp32 peak", "{:.1f}"),
    Column("trials"),
    Column("matches torch"),
]
SEEDS_NOTE = (
    "Independent searches differ by seed: spread is the slowest over the fastest; PyTorch fp32 is"
    " the median of its readings in the same runs."
)


def single_table(runs: list[dict], trials: int, command: str) -> Table:
    """Every figure of one search per workload."""
    rows = [
        [
            r["workload"],
            r["flop"] / 1e9,
            r["ours_us"],
            _record_cell(r),
            r["torch_fp32_us"],
            r["torch_tf32_us"],
            f"{r['ours_eager_us']:.1f} / {r['torch_fp32_eager_us']:.1f}"
            f" / {r['torch_tf32_eager_us']:.1f}",
            r["ratio_vs_fp32"],
            r["gflops"],
            r["pct_fp32_peak"],
            r["trials"],
            r["matches_torch"],
        ]
        for r in runs
    ]
    return Table(
        f"{trials} trials, one search per workload",
        _joined(runs, "machine"),
        _joined(runs, "commit"),
        command,
        SINGLE_COLUMNS,
        rows,
        SINGLE_NOTE,
    )


def seeds_table(runs: list[dict], trials: int, command: str) -> Table:
    """Each seed's GPU time per workload, the spread, PyTorch fp32 and how many seeds beat it."""
    seeds = sorted({r["seed"] for r in runs})
    by_workload: dict[str, dict[int, dict]] = defaultdict(dict)
    for r in runs:
        by_workload[r["workload"]][r["seed"]] = r
    columns = [Column("workload")]
    columns += [Column(f"seed {s} µs", "{:.1f}") for s in seeds]
    columns += [
        Column("spread", "{:.2f}"),
        Column("torch fp32 µs", "{:.1f}"),
        Column("seeds ahead of torch fp32"),
    ]
    rows = []
    for name, by_seed in by_workload.items():
        ours = [r["ours_us"] for r in by_seed.values()]
        ahead = sum(r["ours_us"] < r["torch_fp32_us"] for r in by_seed.values())
        rows.append(
            [name]
            + [by_seed[s]["ours_us"] if s in by_seed else None for s in seeds]
            + [
                max(ours) / min(ours),
                statistics.median(r["torch_fp32_us"] for r in by_seed.values()),
                f"{ahead} of {len(ours)}",
            ]
        )
    return Table(
        f"{trials} trials, seeds {', '.join(map(str, seeds))}",
        _joined(runs, "machine"),
        _joined(runs, "commit"),
        command,
        columns,
        rows,
        SEEDS_NOTE,
    )


def operator_results(runs: list[dict]) -> Results:
    """The operators folder's document: one table per trial count, most trials first."""
    by_trials: dict[int, list[dict]] = defaultdict(list)
    for r in runs:
        by_trials[r["planned_trials"]].append(r)
    tables = []
    for trials in sorted(by_trials, reverse=True):
        group = sorted(by_trials[trials], key=lambda r: (_suite_order(r["workload"]), r["seed"]))
        several = len({r["seed"] for r in group}) > 1
        make = seeds_table if several else single_table
        tables.append(make(group, trials, _command(group, trials)))
    return Results("operators", TITLE, tables, runs)


def runs_below(folders: list[str]) -> list[dict]:
    """Every run in the `operators/results.json` files below `folders` (as a queue of
    `benchmarks.run` searches leaves them, one folder per job)."""
    runs = []
    for folder in folders:
        pattern = os.path.join(folder, "**", "operators", "results.json")
        for path in sorted(glob.glob(pattern, recursive=True)):
            with open(path) as f:
                runs.extend(json.load(f)["runs"])
    return runs


def _record_cell(r: dict) -> str:
    """The search's record and the runner's second reading of it, µs."""
    if r.get("reread_us") is None:
        return f"{r['record_us']:.2f}"
    return f"{r['record_us']:.2f} / {r['reread_us']:.2f}"


def _command(runs: list[dict], trials: int) -> str:
    """The command line that ran `runs`, or its pattern when each workload and seed ran on its
    own (a queue of searches, one per card)."""
    commands = set(r["command"] for r in runs)
    if len(commands) == 1:
        return commands.pop()
    return f"python -m benchmarks.run --workloads W --seeds S --trials {trials}"


def _joined(runs: list[dict], key: str) -> str:
    """The distinct values of `key` over `runs`, in order, joined (usually just one)."""
    return " and ".join(dict.fromkeys(str(r[key]) for r in runs))


def _suite_order(name: str) -> int:
    from autosched.task.workloads import SUITE

    names = list(SUITE)
    return names.index(name) if name in names else len(names)
