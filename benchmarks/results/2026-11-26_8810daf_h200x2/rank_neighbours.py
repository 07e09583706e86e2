"""Would the run's own cost model have picked the faster neighbours? (CPU)

    python3 benchmarks/results/2026-11-26_8810daf_h200x2/rank_neighbours.py \
        NEIGHBOURHOOD.jsonl $(cat .../logs.txt)    # from the repository root, as neighbourhood.py

Regenerates `neighbourhood.py`'s neighbours (same order, same random draws), scores the valid
ones with an XGBModel trained on the whole log (what the search knows after its last round),
and prints per log: the best's time, the fastest neighbour, and the fastest among the model's
top 4, 8 and 16 picks (times from NEIGHBOURHOOD.jsonl, measured on the GPU). Times are matched
by the move's name, and the vector moves of a state's two fetches with the same lengths share
one (the later time counts for both), so a few fastest neighbours read slightly off.
"""

from __future__ import annotations

import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)


def main(jsonl: str, logs: list[str]) -> None:
    import numpy as np
    from neighbourhood import neighbours

    import autosched
    from autosched.records import load_best
    from autosched.search.cost_model import load_dataset
    from autosched.search.policy import SearchParams, SketchPolicy, as_records
    from autosched.task.search_task import SUITE, suite_task

    timed: dict[tuple[str, str], float] = {}
    for line in open(jsonl):
        row = json.loads(line)
        if "us" in row:
            timed[row["log"], row["kind"]] = row["us"]
    by_key = {suite_task(name).workload_key: name for name in SUITE}
    bests = [(log, *load_best(log)) for log in logs]
    rng = random.Random(0)
    for name in dict.fromkeys(by_key[inp.workload_key] for _, inp, _ in bests):
        task = suite_task(name)
        policy = SketchPolicy(task, params=SearchParams(seed=0, n_jobs=1), verbose=0)
        for log, inp, _ in bests:
            if by_key[inp.workload_key] != name:
                continue
            best = as_records(inp.steps)
            cands = neighbours(task.compute_dag, best, policy.sketches, rng)
            outcomes = policy.workers.evaluate([r for _, r in cands])
            pairs = zip(cands, outcomes, strict=True)
            valid = [(k, o) for (k, _), o in pairs if not isinstance(o, str)]
            data = load_dataset(log, 2)
            model = autosched.XGBModel(seed=0)
            model.update(data.features, data.throughputs)
            scores = np.asarray(model.predict([o for _, o in valid]))
            order = [valid[i][0] for i in np.argsort(-scores, kind="stable")]
            times = [timed.get((log, k), float("inf")) for k in order]
            base = timed.get((log, "best"), float("nan"))
            tops = " ".join(f"top{n} {min(times[:n]) / base:.3f}" for n in (4, 8, 16))
            print(
                f"{name} {log.split('/')[3]}/{log.split('/')[4]}: best {base:.2f}, "
                f"all {min(times) / base:.3f} ({len(order)}), {tops}",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
