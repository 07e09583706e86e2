"""The two CPU readings of the suite's record logs in this folder's note (no GPU).

    python3 offline.py layouts WORKLOAD LOG [LOG ...]
    python3 offline.py ceiling WORKLOAD N LOG [LOG ...]
    python3 offline.py failures LOG [LOG ...]
    python3 offline.py twins LOG [LOG ...]

layouts: correct states grouped by what a summary of the tiled stage says (threads per block,
virtual threads, accumulators per thread, blocks, the reduction tile and its inner part, unroll
depth, double-buffered caches, the widest fetch vector); in each group with two or more thread
layouts (a block's threads per spatial axis), the fastest state of its slowest layout over the
fastest state of its fastest layout. Prints the median and upper quantiles of that ratio.

ceiling: for each of the first four logs in turn, an XGBModel (defaults, no few-shot fallback) is
trained on the first N records of every other log and picks 64 of the held-out log's correct
states. Prints how often the picks hold the held-out run's fastest 5% (as a multiple of chance),
the fastest pick over the run's fastest, and the Spearman correlation of scores and speed.

failures: over the 256-record logs given (one workload), the Spearman correlation of a run's
best time with its failed trials after the first round (64 records), and the failed trials of
the fastest and slowest third of the runs.

twins: correct states of the logs (one workload) grouped by their feature matrix, exactly; for
groups of two or more states (which the cost model cannot tell apart), the slowest over the
fastest, and the records in which the most different pairs differ.
"""

from __future__ import annotations

import collections
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def tiled_summary(steps) -> tuple | None:
    """(summary, layout) of a state's first multi-level tiled stage, None without one."""
    spatial = [s for s in steps if s[0] == "SP" and len(s[4]) == 4]
    if not spatial:
        return None
    stage = spatial[0][1]
    spatial = [s for s in spatial if s[1] == stage]
    reduce = [s for s in steps if s[0] == "SP" and s[1] == stage and len(s[4]) == 2]
    vectors = [s[4][0] for s in steps if s[0] == "SP" and s[1] != stage and len(s[4]) == 1]
    summary = (
        math.prod(s[4][1] for s in spatial),
        math.prod(s[4][0] for s in spatial),
        math.prod(s[4][0] * s[4][2] * s[4][3] for s in spatial),
        math.prod(s[3] // math.prod(s[4]) for s in spatial),
        math.prod(math.prod(s[4]) for s in reduce),
        math.prod(s[4][1] for s in reduce),
        tuple(s[3] for s in steps if s[0] == "PR"),
        sum(1 for s in steps if s[0] == "DB"),
        max(vectors, default=0),
    )
    return summary, tuple(s[4][1] for s in spatial)


def layouts(paths: list[str]) -> None:
    from autosched.records import load_records

    groups: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in paths:
        for inp, res in load_records(path):
            got = tiled_summary(inp.steps) if res.ok else None
            if got is not None:
                groups[got[0]][got[1]].append(res.mean_cost)
    ratios = sorted(
        max(min(v) for v in g.values()) / min(min(v) for v in g.values())
        for g in groups.values()
        if len(g) > 1
    )
    if not ratios:
        print("no group has two layouts")
        return
    q = [ratios[int(p * (len(ratios) - 1))] for p in (0.75, 0.9)]
    print(
        f"{len(ratios)} groups with two or more layouts: slowest / fastest layout median "
        f"{statistics.median(ratios):.2f}, 75th percentile {q[0]:.2f}, 90th {q[1]:.2f}"
    )


def ceiling(workload: str, n: int, paths: list[str]) -> None:
    import numpy as np
    from scipy.stats import spearmanr

    import autosched
    from autosched.search.cost_model import load_dataset
    from autosched.task.search_task import suite_task

    key = suite_task(workload).workload_key
    runs = []
    for path in paths:
        data = load_dataset(path, os.cpu_count() or 1)
        runs.append(data.subset([i for i, t in enumerate(data.task_ids) if t == key]))
    rows = []
    for held, run in enumerate(runs[:4]):
        features, throughputs = [], []
        for other, train in enumerate(runs):
            if other != held:
                features += list(train.features[:n])
                throughputs += list(train.throughputs[:n])
        model = autosched.XGBModel(seed=0, few_shot_threshold=0)
        model.fit(features, np.array(throughputs))
        ok = np.flatnonzero(run.throughputs > 0)
        scores = model.predict([run.features[i] for i in ok])
        times = 1.0 / run.throughputs[ok]
        picked = times[np.argsort(-scores, kind="stable")[:64]]
        fastest = np.quantile(times, 0.05)
        rows.append(
            (
                (picked <= fastest).mean() / 0.05,
                picked.min() / times.min(),
                spearmanr(scores, -times).correlation,
            )
        )
    hits, best, rho = np.mean(rows, axis=0)
    print(
        f"{workload}, trained on the first {n} records of {len(runs) - 1} other runs: fastest 5% "
        f"picked x{hits:.2f} chance, fastest pick / run's fastest {best:.3f}, Spearman {rho:.2f}"
    )


def failures(paths: list[str]) -> None:
    import numpy as np
    from scipy.stats import spearmanr

    from autosched.records import load_records

    rows = []
    for path in paths:
        records = list(load_records(path))
        if len(records) != 256:
            continue
        best = min(res.mean_cost for _, res in records if res.ok) * 1e6
        rows.append((best, sum(1 for _, res in records[64:] if not res.ok)))
    rows.sort()
    best, failed = np.array(rows).T
    third = len(rows) // 3
    print(
        f"{len(rows)} runs: Spearman(best, failed after round 1) {spearmanr(best, failed)[0]:.2f};"
        f" failed, fastest third {failed[:third].mean():.1f}, slowest third "
        f"{failed[-third:].mean():.1f}"
    )


def twins(paths: list[str]) -> None:
    import numpy as np

    from autosched.features.extract import state_features
    from autosched.records import load_records
    from autosched.schedule.compute_dag import ComputeDAG

    groups: dict = collections.defaultdict(list)
    dags: dict = {}
    n = 0
    for path in paths:
        for inp, res in load_records(path):
            if not res.ok:
                continue
            dag = dags.get(inp.workload_key)
            if dag is None:
                dag = dags[inp.workload_key] = ComputeDAG.from_workload_key(inp.workload_key)
            features = np.asarray(state_features(dag.replay_steps(inp.steps)), np.float32)
            groups[features.tobytes()].append((res.mean_cost * 1e6, inp.steps))
            n += 1
    twins = [sorted(g, key=lambda t: t[0]) for g in groups.values() if len(g) > 1]
    print(f"{n} correct states, {len(groups)} distinct feature matrices, {len(twins)} shared")
    if not twins:
        return
    ratios = sorted(g[-1][0] / g[0][0] for g in twins)
    q = [ratios[int(p * (len(ratios) - 1))] for p in (0.5, 0.9)]
    print(
        f"slowest / fastest of one matrix: median {q[0]:.3f}, 90th {q[1]:.3f}, max {ratios[-1]:.3f}"
    )
    for g in sorted(twins, key=lambda g: g[0][0] / g[-1][0])[:3]:
        (fast, a), (slow, b) = g[0], g[-1]
        differ = [(x, y) for x, y in zip(a, b, strict=False) if x != y]
        print(f"  {fast:.1f} vs {slow:.1f} µs: {differ}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["layouts"]:
        layouts(sys.argv[3:])
    elif sys.argv[1:2] == ["ceiling"]:
        ceiling(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif sys.argv[1:2] == ["failures"]:
        failures(sys.argv[2:])
    elif sys.argv[1:2] == ["twins"]:
        twins(sys.argv[2:])
    else:
        raise SystemExit(__doc__)
