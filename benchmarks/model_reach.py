"""Would a run's own model lead it to what another run found? From record logs, no GPU.

    python3 benchmarks/model_reach.py matmul LOG_A LOG_B [LOG_C ...] [--after 128 192]

For each log and each N of `--after`: a policy is given the log's first N records (as measured,
the cost model trained on them, as the search had them after N trials), searches one round of 64
as `SketchPolicy.search_one_round` does, and the model scores both its batch and the five
fastest states of every other log. Printed per other log: its best time and the share of the
batch its five best states score above. A share near 0 means the run's model ranks the states
another run found below nearly everything it would measure next: it will not go there.
`--model NAME=VALUE` sets an XGBParams field of the run's model, as in run.py.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def fastest(records: list, k: int) -> list:
    """The inputs of the k fastest correct records."""
    ok = sorted((r.mean_cost, i) for i, (_, r) in enumerate(records) if r.ok)
    return [records[i][0] for _, i in ok[:k]]


def policy_after(task, records: list, model, params):
    """A policy that has measured `records` ((input, result) pairs of a log, in order), its
    cost model trained on them: the search as it stood after those trials."""
    from autosched.search.policy import SketchPolicy, as_records

    policy = SketchPolicy(task, model, params, verbose=0)
    states = []
    for inp, res in records:
        policy.add_measured_records(inp.steps, res.mean_cost)
        states.append(policy.workers.context.replay(as_records(inp.steps)))
    policy.update_model(states, [res.mean_cost for _, res in records])
    return policy


def main() -> int:
    import numpy as np
    from run import model_param  # this folder, beside this script

    import autosched
    from autosched.records import load_records
    from autosched.search.policy import SearchParams, as_records
    from autosched.task.search_task import suite_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--after", type=int, nargs="+", default=[128, 192])
    ap.add_argument("--n-jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--model", action="append", default=[], metavar="NAME=VALUE", type=model_param)
    ns = ap.parse_args()
    task = suite_task(ns.workload)
    logs = [list(load_records(path)) for path in ns.logs]
    for a, records in enumerate(logs):
        for n in ns.after:
            params = SearchParams(seed=a * 1000 + n, n_jobs=ns.n_jobs)
            model = autosched.XGBModel(seed=a, nthread=2, **dict(ns.model))
            policy = policy_after(task, records[:n], model, params)
            batch = [s.key() for s in policy.search_one_round(64)]
            _, batch_scores = policy.score(batch)
            own = min(r.mean_cost for _, r in records[:n] if r.ok)
            line = f"{os.path.basename(ns.logs[a])} after {n}: own best {own * 1e6:.1f} us"
            for b, other in enumerate(logs):
                if b == a:
                    continue
                _, scores = policy.score([as_records(i.steps) for i in fastest(other, 5)])
                above = np.mean([(batch_scores < s).mean() for s in scores])
                best = min(r.mean_cost for _, r in other if r.ok)
                name = os.path.basename(ns.logs[b])
                line += f" | {name} ({best * 1e6:.1f} us): above {above:.2f}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
