"""How well does a model trained on a run's first N records pick from states it has not seen?
From record logs of one workload, no GPU.

    python3 benchmarks/pick_quality.py matmul LOG_A LOG_B [LOG_C ...] [--after 32 64 100 128]

For each ordered pair of logs (A, B) and each N: an XGBModel (no few-shot fallback) is trained
on A's first N records, scores B's correct states, and picks its 64 best. Printed per N, over the
pairs: the fastest picked state's time over B's fastest (1.0 = it picked B's best), the same for
64 states drawn at random (mean of 200 draws), and how many times more often than chance the
picks hold one of B's fastest 5%. A model that does no better than chance here should not steer
the search yet (`XGBParams.few_shot_threshold`).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> int:
    import numpy as np
    from model_reach import policy_after  # this folder, beside this script

    import autosched
    from autosched.records import load_records
    from autosched.search.policy import SearchParams, as_records
    from autosched.task.search_task import suite_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--after", type=int, nargs="+", default=[32, 64, 100, 128])
    ap.add_argument("--pick", type=int, default=64)
    ns = ap.parse_args()
    task = suite_task(ns.workload)
    runs = [
        [(i, r) for i, r in load_records(path) if i.workload_key == task.workload_key]
        for path in ns.logs
    ]
    rng = np.random.default_rng(0)
    for n in ns.after:
        rows = []
        for a, own in enumerate(runs):
            model = autosched.XGBModel(seed=a, nthread=2, few_shot_threshold=0)
            policy = policy_after(task, own[:n], model, SearchParams(seed=a, n_jobs=1))
            for b, other in enumerate(runs):
                if b == a:
                    continue
                cost = {as_records(i.steps): r.mean_cost for i, r in other if r.ok}
                keys, scores = policy.score(list(cost))
                truth = np.array([cost[k] for k in keys])
                picked = truth[np.argsort(-scores)[: ns.pick]]
                drawn = [
                    truth[rng.choice(len(truth), ns.pick, replace=False)].min() for _ in range(200)
                ]
                fastest = np.quantile(truth, 0.05)
                rows.append(
                    (
                        picked.min() / truth.min(),
                        np.mean(drawn) / truth.min(),
                        (picked <= fastest).mean() / 0.05,
                    )
                )
        r = np.array(rows)
        print(
            f"after {n}: picked best / pool best {r[:, 0].mean():.3f}, random {r[:, 1].mean():.3f};"
            f" fastest 5% picked x{r[:, 2].mean():.2f} chance ({len(r)} pairs)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
