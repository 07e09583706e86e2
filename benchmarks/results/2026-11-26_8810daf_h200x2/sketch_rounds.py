"""Per round of 64 trials, how many states of each conv2d_bias_relu sketch a run measured and
the fastest of them (µs; inf: none correct), and its failures by sketch (CPU, from the logs).

    python3 sketch_rounds.py LOG [LOG ...]

plain: the unsplit multi-level tiling; k4, k16: its reduction split in 4 or 16 parts
(split-K, an rfactor step; the parts are the first split's length).
"""

from __future__ import annotations

import collections
import gzip
import json
import math
import sys


def sketch(steps: list) -> str:
    if not any(s[0] == "RF" for s in steps):
        return "plain"
    return f"k{next(s for s in steps if s[0] == 'SP')[4][0]}"


def main(logs: list[str]) -> None:
    for path in logs:
        records = [json.loads(line) for line in gzip.open(path, "rt")]
        rounds, failed = [], collections.Counter()
        for start in range(0, len(records), 64):
            seen: dict[str, tuple[int, float]] = {}
            for rec in records[start : start + 64]:
                name, res = sketch(rec["steps"]), rec["result"]
                ok = res.get("error_kind", 0) == 0 and res.get("costs")
                us = min(res["costs"]) * 1e6 if ok else math.inf
                if not ok:
                    failed[name, res.get("error_name")] += 1
                n, best = seen.get(name, (0, math.inf))
                seen[name] = (n + 1, min(best, us))
            rounds.append(" ".join(f"{k} {n}/{b:.0f}" for k, (n, b) in sorted(seen.items())))
        print(f"{path}\n  rounds: {' | '.join(rounds)}")
        print("  failed: " + ", ".join(f"{k} {e} {n}" for (k, e), n in sorted(failed.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
