"""How well does a model trained on a run's first N records pick from states it has not seen?
From record logs of one workload, no GPU.

    python3 benchmarks/pick_quality.py matmul LOG_A LOG_B [LOG_C ...] [--after 32 64 100 128]
        [--setting NAME=VALUE[,NAME=VALUE ...] ...]

For each ordered pair of logs (A, B) and each N: an XGBModel (no few-shot fallback; each
`--setting` is one model to try, its XGBParams fields set as run.py's `--model` sets them) is
trained on A's first N records, scores B's correct states, and picks its 64 best. Printed per
setting and N, over the pairs: the fastest picked state's time over B's fastest (1.0 = it picked
B's best), the same for 64 states drawn at random (mean of 200 draws), and how many times more
often than chance the picks hold one of B's fastest 5%. A model that does no better than chance
here should not steer the search yet (`XGBParams.few_shot_threshold`); comparing settings on the
same logs compares how early each lets a run's model find what other runs found. Every log's
features are extracted once (`load_dataset`), and only the named suite workload's records are
read.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> int:
    import numpy as np
    from run import model_param  # this folder, beside this script

    from autosched.search.cost_model import load_dataset
    from autosched.task.search_task import suite_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--after", type=int, nargs="+", default=[32, 64, 100, 128])
    ap.add_argument("--pick", type=int, default=64)
    ap.add_argument(
        "--setting",
        action="append",
        type=lambda text: tuple(model_param(part) for part in text.split(",")),
        metavar="NAME=VALUE[,NAME=VALUE...]",
        help="one model to try (repeatable; default: XGBParams' defaults)",
    )
    ap.add_argument("--n-jobs", type=int, default=os.cpu_count() or 1)
    ns = ap.parse_args()
    key = suite_task(ns.workload).workload_key
    datasets = [load_dataset(path, ns.n_jobs) for path in ns.logs]
    runs = [d.subset([i for i, t in enumerate(d.task_ids) if t == key]) for d in datasets]
    for setting in ns.setting or [()]:
        name = ",".join(f"{k}={v}" for k, v in setting) or "defaults"
        rng = np.random.default_rng(0)
        for n in ns.after:
            r = np.array(pair_figures(runs, n, ns.pick, dict(setting), rng))
            print(
                f"{name} after {n}: picked best / pool best {r[:, 0].mean():.3f},"
                f" random {r[:, 1].mean():.3f}; fastest 5% picked x{r[:, 2].mean():.2f} chance"
                f" ({len(r)} pairs)",
                flush=True,
            )
    return 0


def pair_figures(runs: list, n: int, pick: int, settings: dict, rng) -> list[tuple]:
    """Per ordered pair of runs (A, B): (best of the pick / B's best, the same for a random
    pick, how many times chance the pick holds B's fastest 5%), the model trained on A's first
    n programs."""
    import numpy as np

    import autosched

    rows = []
    for a, own in enumerate(runs):
        model = autosched.XGBModel(seed=a, nthread=2, few_shot_threshold=0, **settings)
        model.fit(own.features[:n], own.throughputs[:n])
        for b, other in enumerate(runs):
            if b == a:
                continue
            ok = np.flatnonzero(other.throughputs > 0)
            scores = model.predict([other.features[i] for i in ok])
            truth = 1.0 / other.throughputs[ok]  # time, in the units of 1 / throughput
            picked = truth[np.argsort(-scores, kind="stable")[:pick]]
            drawn = [truth[rng.choice(len(truth), pick, replace=False)].min() for _ in range(200)]
            fastest = np.quantile(truth, 0.05)
            rows.append(
                (
                    picked.min() / truth.min(),
                    np.mean(drawn) / truth.min(),
                    (picked <= fastest).mean() / 0.05,
                )
            )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
