"""Where a run's improvements come from (CPU, from the logs).

    python3 jumps.py 'GLOB'          # e.g. '../2026-11-26_*_h200x2/*/seed*/conv2d_b16/*16.json.gz'

For every new best at least 3% faster than the last, after the first round of 64: how many
decisions (split lengths, unroll depths, and the double-buffer and padding steps taken together)
it differs in from the previous best, and from the nearest state the run had measured before.
Prints the counts by distance (6 or more as 6).
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import math
import sys


def decisions(steps: list) -> tuple:
    lengths = tuple(tuple(s[4]) if s[0] == "SP" else s[3] for s in steps if s[0] in ("SP", "PR"))
    return lengths, tuple(sorted(tuple(map(str, s)) for s in steps if s[0] in ("DB", "SA")))


def distance(a: tuple, b: tuple) -> int:
    if len(a[0]) != len(b[0]):
        return 99
    return sum(x != y for x, y in zip(a[0], b[0], strict=True)) + (a[1] != b[1])


def main(pattern: str) -> None:
    from_best, from_any = collections.Counter(), collections.Counter()
    for path in sorted(glob.glob(pattern)):
        best, best_d, seen = math.inf, None, []
        for i, line in enumerate(gzip.open(path, "rt")):
            rec = json.loads(line)
            res = rec["result"]
            ok = res.get("error_kind", 0) == 0 and res.get("costs")
            us = min(res["costs"]) * 1e6 if ok else math.inf
            d = decisions(rec["steps"])
            if ok and i >= 64 and us < 0.97 * best:
                from_best[min(distance(best_d, d), 6)] += 1
                from_any[min(min(distance(s, d) for s in seen), 6)] += 1
            if ok and us < best:
                best, best_d = us, d
            seen.append(d)
    print("from the previous best:", sorted(from_best.items()))
    print("from the nearest state measured before:", sorted(from_any.items()))


if __name__ == "__main__":
    main(sys.argv[1])
