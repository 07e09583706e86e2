"""How far apart do independent searches of one workload land? From `benchmarks/run.py` output
folders, no GPU.

    python3 benchmarks/seed_spread.py FOLDER [FOLDER ...] [--workloads W ...] [--within 0.10]

Every `results.json` (or `.json.gz`) below the folders is one run (one seed of one `run.py`
command); the folders above its `seedN/` name its setting (`read_runs`). Printed per workload: each
setting's times and spread (slowest / fastest), then all runs pooled: their mean, standard
deviation, and how often three of them, drawn with replacement, land within `--within` of each
other (slowest / fastest - 1).

Why pool: three seeds of one setting are a noisy test of a search's spread. If a setting does
not change the distribution a run's best is drawn from, the three-seed spread of its command is
about what three draws from the pool give, and pooling the commands of several settings
estimates that distribution. For three normal draws to fall within a fraction w of each other
nine times in ten, their standard deviation must be about w / 2.9 of the mean (the 90th
percentile of the range of three standard normal draws).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import statistics
from collections import defaultdict

RANGE_OF_THREE_P90 = 2.90  # 90th percentile of max - min of three standard normal draws


def read_runs(folders: list[str]) -> dict[str, dict[str, list[float]]]:
    """{workload: {setting: [µs of each run]}} from every results.json (or results.json.gz)
    below the folders. A setting is the folder named on the command line joined with the path
    below it, less the `seedN` folder and a folder named after the workload: `run.py --seeds`
    writes SETTING/seedN/results.json, `run_queue.py` SETTING/seedN/WORKLOAD/results.json."""
    runs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for folder in folders:
        paths = [
            p
            for name in ("results.json", "results.json.gz")
            for p in glob.glob(os.path.join(folder, "**", name), recursive=True)
        ]
        for path in sorted(paths):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                rows = json.load(f)["rows"]
            below = os.path.relpath(os.path.dirname(path), folder).split(os.sep)
            for row in rows:
                parts = [
                    p for p in below if not is_seed_folder(p) and p not in (".", row["workload"])
                ]
                setting = os.path.join(os.path.basename(os.path.normpath(folder)), *parts)
                runs[row["workload"]][os.path.normpath(setting)].append(float(row["ours_us"]))
    return runs


def is_seed_folder(name: str) -> bool:
    """Whether a folder is one seed's (`seed0`, `seed12`)."""
    return name.startswith("seed") and name[4:].isdigit()


def spread(times: list[float]) -> float:
    """Slowest over fastest."""
    return max(times) / min(times)


def chance_three_within(times: list[float], within: float) -> float:
    """The share of the len(times)**3 ordered triples (drawn with replacement) whose slowest is
    at most 1 + within times their fastest: exact, by counting for each fastest value how many
    values lie in its window."""
    ordered = sorted(times)
    n = len(ordered)
    hits = 0
    for i, low in enumerate(ordered):
        # triples whose smallest value is ordered[i] (the first such index, to count ties once)
        if i and ordered[i - 1] == low:
            continue
        ties = ordered.count(low)
        window = sum(1 for t in ordered if low <= t <= low * (1 + within))
        # all three in the window, minus those with no value equal to `low`
        hits += window**3 - (window - ties) ** 3
    return hits / n**3


def pooled(times: list[float], within: float) -> dict:
    mean = statistics.mean(times)
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    return {
        "runs": len(times),
        "mean": mean,
        "sd": sd,
        "cv": sd / mean,
        "fastest": min(times),
        "slowest": max(times),
        "three_within": chance_three_within(times, within),
    }


def report(runs: dict[str, dict[str, list[float]]], within: float) -> str:
    lines = []
    for workload in sorted(runs):
        settings = runs[workload]
        lines += [f"## {workload}", "", "| setting | µs per run | spread |", "|---|---|---|"]
        for setting in sorted(settings):
            times = settings[setting]
            shown = " / ".join(f"{t:.2f}" for t in times)
            lines.append(f"| {setting} | {shown} | {spread(times):.2f} |")
        every = [t for times in settings.values() for t in times]
        p = pooled(every, within)
        groups = [t for t in settings.values() if len(t) == 3]
        inside = sum(spread(t) <= 1 + within for t in groups)
        lines += [
            "",
            f"Pooled: {p['runs']} runs, mean {p['mean']:.2f} µs, standard deviation {p['sd']:.2f}"
            f" ({100 * p['cv']:.1f}% of the mean), {p['fastest']:.2f} to {p['slowest']:.2f}."
            f" Three runs drawn from them land within {100 * within:.0f}% of each other"
            f" {100 * p['three_within']:.0f}% of the time; {inside} of the {len(groups)}"
            f" three-run settings did. Nine times in ten would take a standard deviation of"
            f" about {100 * within / RANGE_OF_THREE_P90:.1f}% of the mean.",
            "",
        ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--workloads", nargs="+", help="only these workloads (default: all found)")
    ap.add_argument("--within", type=float, default=0.10)
    ns = ap.parse_args()
    runs = read_runs(ns.folders)
    if ns.workloads:
        missing = sorted(set(ns.workloads) - set(runs))
        if missing:
            ap.error(f"no results.json below the folders holds {', '.join(missing)}")
        runs = {w: runs[w] for w in ns.workloads}
    if not runs:
        ap.error("no results.json below the folders")
    print(report(runs, ns.within))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
