"""User-defined search spaces on the GPU: the AutoTVM tutorial's conv2d template (XGBTuner) and
the stochastic matmul schedule (evolutionary trace search), each against the template-free
sketch search on the same workload with the same number of trials.

    python3 benchmarks/spaces_gpu.py --trials 256 --out results/

Writes `<run>.log.json` record logs and `spaces.json` (best µs per run, as recorded by the
runner: GPU time by CUDA graph replay).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

SEED_CONV = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
MATMUL = (1024, 1024, 1024)


def conv2d_template(trials: int, out: str) -> dict:
    import autosched.spaces.conv2d_template  # noqa: F401  (registers the tutorial's template)
    from autosched.records import RecordToFile
    from autosched.spaces.model_tuner import XGBTuner
    from autosched.spaces.template import TemplateTask

    task = TemplateTask("tutorial/conv2d_no_batching", SEED_CONV)
    log = os.path.join(out, "conv2d_template.log.json")
    t0 = time.perf_counter()
    best = XGBTuner(task).tune(trials, callbacks=[RecordToFile(log)], batch_size=64)
    cost = best.mean_cost if best is not None else math.inf
    return {
        "space": "template",
        "workload": "conv2d",
        "best_us": cost * 1e6,
        "seconds": time.perf_counter() - t0,
        "dag": task.compute_dag,
    }


def stochastic_matmul(trials: int, out: str) -> dict:
    from autosched import te, topi
    from autosched.schedule.compute_dag import ComputeDAG
    from autosched.spaces.stochastic_matmul import stochastic_matmul as schedule
    from autosched.spaces.tune_space import tune_space
    from autosched.task.search_task import SearchTask

    a = te.placeholder((MATMUL[0], MATMUL[2]), name="A")
    b = te.placeholder((MATMUL[2], MATMUL[1]), name="B")
    dag = ComputeDAG([a, b, topi.matmul(a, b)])
    log = os.path.join(out, "matmul_stochastic.log.json")
    t0 = time.perf_counter()
    task = SearchTask(dag=dag)
    res = tune_space(task, schedule, num_trials=trials, log=log, per_round=64, verbose=1)
    return {
        "space": "stochastic",
        "workload": "matmul",
        "best_us": res.best_cost * 1e6,
        "seconds": time.perf_counter() - t0,
        "dag": dag,
    }


def sketch_search(dag, name: str, trials: int, out: str) -> dict:
    from autosched.records import RecordToFile
    from autosched.search.auto_schedule import TuningOptions, auto_schedule
    from autosched.task.search_task import SearchTask

    t0 = time.perf_counter()
    log = os.path.join(out, f"{name}_sketch.log.json")
    opts = TuningOptions(
        num_measure_trials=trials,
        num_measures_per_round=64,
        measure_callbacks=[RecordToFile(log)],
        verbose=1,
    )
    res = auto_schedule(SearchTask(dag=dag), tuning_options=opts)
    return {
        "space": "sketch",
        "workload": name,
        "best_us": res.best_cost * 1e6,
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--out", default="spaces_out")
    ns = ap.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    rows = []
    for run, workload in ((conv2d_template, "conv2d"), (stochastic_matmul, "matmul")):
        row = run(ns.trials, ns.out)
        dag = row.pop("dag")
        rows += [row, sketch_search(dag, workload, ns.trials, ns.out)]
        with open(os.path.join(ns.out, "spaces.json"), "w") as f:
            json.dump(rows, f, indent=1)
        for r in rows[-2:]:
            print(
                f"{r['workload']:8s} {r['space']:10s} best {r['best_us']:8.1f} us  "
                f"({r['seconds']:.0f} s)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
