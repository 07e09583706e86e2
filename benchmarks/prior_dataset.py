"""Extract the cost-model features of record logs once and save them as one dataset (`.npz`),
for `benchmarks/run.py --prior` (`cost_model.read_dataset` checks the feature layout on load).

    python3 benchmarks/prior_dataset.py LOG [LOG ...] --out prior.npz [--n-jobs N]
"""

from __future__ import annotations

import argparse
import collections
import os


def main() -> int:
    from autosched.search.cost_model import Dataset, load_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-jobs", type=int, default=os.cpu_count() or 1)
    ns = ap.parse_args()
    if not ns.out.endswith(".npz"):
        ap.error(f"--out {ns.out}: a dataset file must end in .npz (read_dataset tells by it)")
    data = Dataset.joined([load_dataset(path, ns.n_jobs) for path in ns.logs])
    data.save(ns.out)
    per_task = collections.Counter(data.task_ids)
    print(f"{ns.out}: {len(data)} programs of {len(per_task)} tasks from {len(ns.logs)} logs")
    for task, n in sorted(per_task.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {task}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
