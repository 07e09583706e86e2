"""Do runs that lose more trials to the compile timeout end slower? (no GPU)

    python3 benchmarks/results/2026-11-26_eebf5c8_h100x4/compile_timeouts.py GLOB [GLOB ...]

Each GLOB names the record logs of one group of runs (one workload, one setting). Per group: the
share of each run's trials that ended COMPILE_TIMEOUT, the range of the runs' bests, and the
correlation between the two; then the correlation pooled over the groups (each group's values
standardized first, so that groups of different workloads and machines can be pooled).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))


def scan(log: str) -> tuple[float, float | None]:
    """(share of trials that timed out compiling, best mean cost in µs or None)."""
    from measure.errors import MeasureErrorKind

    timeout = int(MeasureErrorKind.COMPILE_TIMEOUT)
    trials = timed_out = 0
    best = None
    with gzip.open(log, "rt") if log.endswith(".gz") else open(log) as f:
        for line in f:
            if not line.strip():
                continue
            result = json.loads(line)["result"]
            trials += 1
            timed_out += result["error_kind"] == timeout
            if result["error_kind"] == 0 and result["costs"]:
                cost = statistics.mean(result["costs"]) * 1e6
                best = cost if best is None or cost < best else best
    return (timed_out / trials if trials else 0.0), best


def correlation(pairs: list[tuple[float, float]]) -> float:
    xs, ys = zip(*pairs, strict=True)
    sx, sy = statistics.pstdev(xs), statistics.pstdev(ys)
    if not sx or not sy:
        return float("nan")
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in pairs) / len(pairs) / sx / sy


def main(patterns: list[str]) -> None:
    pooled = []
    for pattern in patterns:
        logs = [p for p in glob.glob(pattern) if not os.path.basename(p).startswith("results")]
        pairs = [(share, best) for share, best in map(scan, logs) if best is not None]
        if len(pairs) < 3:
            print(f"{pattern}: {len(pairs)} runs, too few")
            continue
        shares = [100 * s for s, _ in pairs]
        bests = [b for _, b in pairs]
        r = correlation(pairs)
        print(
            f"{pattern}: {len(pairs)} runs, timed out {min(shares):.0f}-{max(shares):.0f}% of "
            f"trials (mean {statistics.mean(shares):.0f}%), best {min(bests):.1f}-"
            f"{max(bests):.1f} µs, correlation {r:+.2f}"
        )
        if statistics.pstdev(shares) and statistics.pstdev(bests):
            ms, ss = statistics.mean(shares), statistics.pstdev(shares)
            mb, sb = statistics.mean(bests), statistics.pstdev(bests)
            pooled += [((s - ms) / ss, (b - mb) / sb) for s, b in zip(shares, bests, strict=True)]
    if pooled:
        print(f"pooled over {len(pooled)} runs: correlation {correlation(pooled):+.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
