"""How a search progressed, from its record log alone (no GPU): the best time after each quarter
of its trials, the trial that found its best, the share of failed trials by kind, and whether
its best state is double-buffered. For comparing runs of one workload that differ by seed.
With --shapes, how each round's batch spread over launch shapes (the tiling: grid, block,
virtual threads, shared and local bytes), which shows whether a search settled on one tiling.
With --threads, per workload over all the logs given: how many threads the measured states
launch (grid times block, in powers of two), the share of first-round (fresh, random) and of
later states at each, how many runs' bests launch that many, and the fastest state there; which
shows how much of a search goes to launches too small (or too large) to be fast. With --blocks,
the same per block shape (a block's threads along each spatial axis of the tiled stage, e.g.
1x2x7x7), fastest first: which shows whether runs that end slower never met the shapes of the
faster runs or met them and left them.

    python3 benchmarks/log_progress.py LOG [LOG ...] [--shapes] [--threads] [--blocks]
        [--out FILE.md]
"""

from __future__ import annotations

import argparse
import collections
import functools
import math
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


@functools.cache
def logged_shapes(path: str) -> list[tuple]:
    """(MeasureInput, result, launch shape) of each of a log's records, in order: the shapes
    lower every state, so --shapes and --threads read them once."""
    from autosched.features.extract import state_features
    from autosched.records import load_records
    from autosched.search.policy import launch_shape

    return [(inp, res, launch_shape(state_features(inp.state))) for inp, res in load_records(path)]


def shapes_per_round(path: str, batch: int = 64) -> list[tuple[int, int]]:
    """Per round of `batch` records: distinct launch shapes, and the most records of one."""
    records = logged_shapes(path)
    rounds = []
    for start in range(0, len(records), batch):
        shapes = collections.Counter(shape for _, _, shape in records[start : start + batch])
        rounds.append((len(shapes), max(shapes.values())))
    return rounds


def launch_threads(shape: tuple) -> int:
    """Threads a launch shape (`launch_shape`, features scaled by log2(1 + x)) starts: grid
    extents times block extents (each the largest over the program's kernels)."""
    return math.prod(round(2.0**v - 1) for v in shape[:6]) if shape else 0


def keyed_rows(runs) -> dict[str, list[tuple]]:
    """{workload key: [(trial index, key, µs or None if failed, run id)]} from each run's
    (input, result, key) triples in trial order; records whose key is None are left out."""
    rows: dict[str, list[tuple]] = collections.defaultdict(list)
    for run, triples in enumerate(runs):
        for i, (inp, res, key) in enumerate(triples):
            if key is not None:
                us = res.mean_cost * 1e6 if res.ok else None
                rows[inp.workload_key].append((i, key, us, run))
    return rows


def threads_rows(paths: list[str]) -> dict[str, list[tuple]]:
    """`keyed_rows` over the logs (a run is one log), keyed by log2 of the threads launched,
    rounded."""

    def bucket(shape: tuple) -> int | None:
        threads = launch_threads(shape)
        return round(math.log2(threads)) if threads else None

    return keyed_rows(
        [(inp, res, bucket(shape)) for inp, res, shape in logged_shapes(path)] for path in paths
    )


def threads_table(rows: list[tuple], first_round: int = 64) -> str:
    """One workload's `threads_rows`: per power of two of threads launched, the share of
    first-round and of later states there, the runs whose best is there, the fastest state."""
    return spread_table(rows, "threads launched", lambda b: f"2^{b}", first_round)


def block_shape(steps) -> str:
    """A state's block shape (`autosched.search.candidates.block_shape`: a block's threads along
    each spatial axis of its multi-level tiled stages) joined by x, e.g. 1x2x7x7: which axes
    the block spans. '' for a state without a multi-level tiling."""
    from autosched.search.candidates import block_shape as threads_per_axis
    from autosched.search.policy import as_records

    return "x".join(map(str, threads_per_axis(as_records(steps))))


def block_rows(paths: list[str]) -> dict[str, list[tuple]]:
    """`keyed_rows` over the logs (a run is one log), keyed by `block_shape`; states without a
    tiled stage are left out."""
    from autosched.records import load_records

    return keyed_rows(
        [(inp, res, block_shape(inp.steps) or None) for inp, res in load_records(path)]
        for path in paths
    )


def blocks_table(rows: list[tuple], first_round: int = 64, min_share: float = 0.02) -> str:
    """One workload's `block_rows`, fastest block shape first: the shapes that hold a run's
    best or at least `min_share` of the first-round or of the later states; the rest in one
    row."""
    return spread_table(rows, "threads per axis", str, first_round, min_share, by_speed=True)


def spread_table(
    rows: list[tuple],
    heading: str,
    label,
    first_round: int = 64,
    min_share: float = 0.0,
    by_speed: bool = False,
) -> str:
    """Rows (trial index, key, µs or None, run) as a table: per key, the share of first-round
    and of later states there, the runs whose best is there, the fastest state. Keys in their
    own order, or fastest first (`by_speed`); keys with no run's best and less than
    `min_share` in both columns are summed in a last row."""
    first = collections.Counter(k for i, k, _, _ in rows if i < first_round)
    later = collections.Counter(k for i, k, _, _ in rows if i >= first_round)
    fastest: dict = {}
    best_of_run: dict[int, tuple] = {}
    for _, key, us, run in rows:
        if us is None:
            continue
        fastest[key] = min(fastest.get(key, us), us)
        if run not in best_of_run or us < best_of_run[run][0]:
            best_of_run[run] = (us, key)
    bests = collections.Counter(k for _, k in best_of_run.values())
    n_first, n_later = max(1, sum(first.values())), max(1, sum(later.values()))
    keys = set(first) | set(later)
    order = (
        sorted(keys, key=lambda k: (fastest.get(k, math.inf), str(k))) if by_speed else sorted(keys)
    )
    shown = [
        k
        for k in order
        if bests[k] or first[k] / n_first >= min_share or later[k] / n_later >= min_share
    ]
    lines = [
        f"| {heading} | first {first_round} trials | later trials | runs whose best"
        f" ({len(best_of_run)} runs) | fastest µs |",
        "|---|---|---|---|---|",
    ]
    for k in shown:
        fast = f"{fastest[k]:.2f}" if k in fastest else "-"
        lines.append(
            f"| {label(k)} | {first[k] / n_first:.2f} | {later[k] / n_later:.2f} | {bests[k]}"
            f" | {fast} |"
        )
    rest = [k for k in order if k not in shown]
    if rest:
        lines.append(
            f"| {len(rest)} others | {sum(first[k] for k in rest) / n_first:.2f}"
            f" | {sum(later[k] for k in rest) / n_later:.2f} | 0 | - |"
        )
    return "\n".join(lines) + "\n"


def shapes_table(paths: list[str], name_of, batch: int = 64) -> str:
    """One row per log: each round's distinct shapes / picks of its most measured shape."""
    lines = [
        "| log | per round: distinct launch shapes / records in the most measured shape |",
        "|---|---|",
    ]
    for path in paths:
        cells = " ".join(f"{n}/{top}" for n, top in shapes_per_round(path, batch))
        lines.append(f"| {name_of(path)} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", action="store_true", help="also each round's launch shapes")
    ap.add_argument(
        "--threads", action="store_true", help="also the threads launched, per workload"
    )
    ap.add_argument(
        "--blocks", action="store_true", help="also the block's threads per axis, per workload"
    )
    ns = ap.parse_args()
    lines = [
        "| log | trials | best µs | found at trial | best after each quarter µs | failed |"
        " best double-buffered |",
        "|---|---|---|---|---|---|---|",
    ]
    # each log named by its path below the folder all of them share (its file name for one)
    common = os.path.commonpath([os.path.dirname(os.path.abspath(x)) for x in ns.logs])

    def name_of(path: str) -> str:
        return os.path.relpath(os.path.abspath(path), common)

    for path in ns.logs:
        p = progress(path)
        p["log"] = name_of(path)
        quarters = " / ".join(f"{c:.1f}" for c in p["quarters_us"])
        failed = ", ".join(f"{k} {v}" for k, v in sorted(p["failed"].items())) or "none"
        lines.append(
            f"| {p['log']} | {p['trials']} | {p['best_us']:.1f} | {p['found_at']} | {quarters}"
            f" | {failed} | {'yes' if p['best_double_buffered'] else 'no'} |"
        )
    text = "\n".join(lines) + "\n"
    if ns.shapes:
        text += "\n" + shapes_table(ns.logs, name_of)
    if ns.threads:
        for key, rows in sorted(threads_rows(ns.logs).items()):
            text += f"\nThreads launched, {key}:\n\n" + threads_table(rows)
    if ns.blocks:
        for key, rows in sorted(block_rows(ns.logs).items()):
            text += f"\nThreads of a block per spatial axis, {key}:\n\n" + blocks_table(rows)
    if ns.out:
        with open(ns.out, "w") as f:
            f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
