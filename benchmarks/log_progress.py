"""How a search progressed, from its record log alone (no GPU): the best time after each quarter
of its trials, the trial that found its best, the share of failed trials by kind, and whether
its best state is double-buffered. For comparing runs of one workload that differ by seed.

    python3 benchmarks/log_progress.py LOG [LOG ...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def progress(path: str) -> dict:
    """The figures of one log (its first workload key's records, in order)."""
    from autosched.records import load_records
    from measure.errors import MeasureErrorKind

    records = list(load_records(path))
    n = len(records)
    best, found, curve = float("inf"), -1, []
    marks = {max(0, (n * q) // 4 - 1) for q in (1, 2, 3, 4)}
    failed: collections.Counter = collections.Counter()
    best_input = None
    for i, (inp, res) in enumerate(records):
        if res.ok and res.mean_cost < best:
            best, found, best_input = res.mean_cost, i, inp
        elif not res.ok:
            failed[MeasureErrorKind(int(res.error_kind)).name] += 1
        if i in marks:
            curve.append(best * 1e6)
    double_buffered = best_input is not None and any(s[0] == "DB" for s in best_input.steps)
    return {
        "log": os.path.basename(path),
        "trials": n,
        "best_us": best * 1e6,
        "found_at": found,
        "quarters_us": curve,
        "failed": dict(failed),
        "best_double_buffered": double_buffered,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--out", default=None)
    ns = ap.parse_args()
    lines = [
        "| log | trials | best µs | found at trial | best after each quarter µs | failed |"
        " best double-buffered |",
        "|---|---|---|---|---|---|---|",
    ]
    # each log named by its path below the folder all of them share (its file name for one)
    common = os.path.commonpath([os.path.dirname(os.path.abspath(x)) for x in ns.logs])
    for path in ns.logs:
        p = progress(path)
        p["log"] = os.path.relpath(os.path.abspath(path), common)
        quarters = " / ".join(f"{c:.1f}" for c in p["quarters_us"])
        failed = ", ".join(f"{k} {v}" for k, v in sorted(p["failed"].items())) or "none"
        lines.append(
            f"| {p['log']} | {p['trials']} | {p['best_us']:.1f} | {p['found_at']} | {quarters}"
            f" | {failed} | {'yes' if p['best_double_buffered'] else 'no'} |"
        )
    text = "\n".join(lines) + "\n"
    if ns.out:
        with open(ns.out, "w") as f:
            f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
