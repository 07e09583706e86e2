"""Would a run's best get faster with its window loops in the other order? (GPU)

    python3 twin_timing.py OUT.jsonl LOG [LOG ...]

For each log, the fastest correct state and its window twins: the same state with one reduction
split of a 3- or 7-wide axis (a convolution's window) reversed, e.g. (1, 3) -> (3, 1), which
moves that loop between the middle and the inner reduction level and changes nothing the
cost model's features see (`offline.py twins`). Each is built as users get it and timed beside
PyTorch by `benchmarks/torch_timing.compare_with_torch` (CUDA graph replay, inputs rotated),
all in one process; one JSON line per state.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))

WINDOW_EXTENTS = (3, 7)


def window_twins(steps: tuple) -> list[tuple]:
    """The steps with one window reduction split's two lengths swapped, one twin per split."""
    twins = []
    for k, s in enumerate(steps):
        if s[0] == "SP" and len(s[4]) == 2 and s[3] in WINDOW_EXTENTS and s[4][0] != s[4][1]:
            twin = list(steps)
            twin[k] = s[:4] + ((s[4][1], s[4][0]),) + s[5:]
            twins.append(tuple(twin))
    return twins


def main(out_path: str, logs: list[str], deadline_s: float = 1e9) -> None:
    from torch_timing import compare_with_torch

    import autosched
    from autosched.records import load_best
    from autosched.schedule.compute_dag import ComputeDAG
    from autosched.search.policy import as_records

    start = time.time()
    with open(out_path, "w") as out:
        for log in logs:
            if time.time() - start > deadline_s:
                break
            inp, res = load_best(log)
            dag = ComputeDAG.from_workload_key(inp.workload_key)
            name, *args = json.loads(inp.workload_key)
            best = as_records(inp.steps)
            for kind, steps in [("best", best)] + [("twin", t) for t in window_twins(best)]:
                row = {"log": log, "kind": kind, "record_us": res.mean_cost * 1e6}
                try:
                    kernel = autosched.build(dag, dag.replay_steps(steps))
                    timed = compare_with_torch(name, tuple(args), kernel)
                    row.update(us=timed["ours_us"], matches=timed["matches_torch"])
                except Exception as e:  # a twin that fails to build or run is reported, not fatal
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    deadline = float(os.environ.get("TWIN_DEADLINE_S", "1e9"))
    main(sys.argv[1], sys.argv[2:], deadline)
