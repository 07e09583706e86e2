"""CPU readings behind this folder's note (no GPU).

    python3 offline.py prior PRIOR.npz WORKLOAD N_OWN [N_OWN ...]
    python3 offline.py accumulators WORKLOAD

prior: for the first ten 256-trial logs of WORKLOAD in the 2026-11-25_*_h100 folders (sorted by
path), three models rank the log's correct records after its first N_OWN (the states the run
measured later): one trained on those first N_OWN records (what the search has after its first
rounds), one on the saved dataset's programs of the other workloads
(`benchmarks/prior_dataset.py`), and one on both (what `XGBModel.add_prior` trains on).
Prints, averaged over the logs, how often each model's 32 top-ranked records hold the fastest
10% (as a multiple of chance), its fastest pick over the fastest, and the Spearman correlation
of scores and speed.

accumulators: a thread's accumulators in the first tiled stage, as a share of the first
(random) rounds of every logged run of WORKLOAD in the 2026-11-25 H100 folders, of the states
within 15% of the fastest logged one, and of 600 fresh samples drawn now with
`spread_accumulators` off and on.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-25_67e554b_h100"))


def logs(workload: str, folders: str) -> list[str]:
    pattern = os.path.join(ROOT, "benchmarks", "results", folders, "*", "seed*", workload)
    return sorted(glob.glob(os.path.join(pattern, f"{workload}.json.gz")))


def prior(path: str, workload: str, counts: list[int]) -> None:
    import numpy as np
    from scipy.stats import spearmanr

    import autosched
    from autosched.search.cost_model import load_dataset, read_dataset
    from autosched.task.search_task import suite_task

    key = suite_task(workload).workload_key
    others = read_dataset(path).without_tasks([key])
    figures: dict[tuple, list] = collections.defaultdict(list)
    first_ten = logs(workload, "2026-11-25_*_h100")[:10]
    runs = [load_dataset(log, os.cpu_count() or 1) for log in first_ten]
    for run, n_own in ((run, n) for run in runs for n in counts):
        own_x, own_y = run.features[:n_own], run.throughputs[:n_own]
        models = {
            "own": (own_x, own_y, [key] * len(own_x)),
            "prior": (others.features, others.throughputs, others.task_ids),
            "both": (
                others.features + own_x,
                np.concatenate([others.throughputs, own_y]),
                others.task_ids + [key] * len(own_x),
            ),
        }
        rest = [i for i in range(n_own, len(run)) if run.throughputs[i] > 0]
        times = 1.0 / run.throughputs[rest]
        for name, (x, y, tasks) in models.items():
            model = autosched.XGBModel(seed=0, few_shot_threshold=0)
            model.fit(x, np.asarray(y), task_ids=tasks)
            scores = np.asarray(model.predict([run.features[i] for i in rest]))
            picked = times[np.argsort(-scores, kind="stable")[:32]]
            figures[n_own, name].append(
                (
                    (picked <= np.quantile(times, 0.1)).mean() / 0.1,
                    picked.min() / times.min(),
                    spearmanr(scores, -times).correlation,
                )
            )
    for (n_own, name), rows in figures.items():
        hits, best, rho = np.mean(rows, axis=0)
        print(
            f"{workload}, {len(rows)} runs, after {n_own} records, {name:5s}: fastest 10% picked "
            f"x{hits:.2f} chance, fastest pick / fastest {best:.3f}, Spearman {rho:.2f}"
        )


def shares(values: list[int]) -> str:
    count = collections.Counter(values)
    return " ".join(f"{v}:{100 * count[v] / len(values):.0f}%" for v in sorted(count))


def accumulators(workload: str) -> None:
    from offline import tiled_summary

    from autosched.records import load_records
    from autosched.search.policy import SearchParams, SketchPolicy
    from autosched.sketch import SketchParams
    from autosched.task.search_task import suite_task

    first, correct = [], []
    for log in logs(workload, "2026-11-25_*_h100"):
        for i, (inp, res) in enumerate(load_records(log)):
            got = tiled_summary(inp.steps)
            if got is not None:
                if i < 64:
                    first.append(got[0][2])
                if res.ok:
                    correct.append((res.mean_cost, got[0][2]))
    best = min(c for c, _ in correct)
    print(f"## {workload}: accumulators per thread")
    print(f"first rounds of the logs ({len(first)} states): {shares(first)}")
    top = [a for c, a in correct if c <= 1.15 * best]
    print(f"within 15% of the fastest ({len(top)} states): {shares(top)}")
    task = suite_task(workload)
    for spread in (False, True):
        params = dataclasses.replace(SketchParams.for_task(task), spread_accumulators=spread)
        policy = SketchPolicy(task, params=SearchParams(seed=0), sketch_params=params, verbose=0)
        drawn = [tiled_summary(r) for r in policy.sample_fresh(600)]
        values = [d[0][2] for d in drawn if d is not None]
        print(f"600 fresh samples, spread_accumulators={spread}: {shares(values)}")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "prior":
        prior(args[0], args[1], [int(n) for n in args[2:]])
    elif command == "accumulators":
        accumulators(args[0])
    else:
        raise SystemExit(__doc__)
