"""Build the cost model the package ships (`costmodel/data/pretrained-v<N>.npz`) from record logs
measured on the GPU machines, and measure how well it ranks workloads it was not trained on.

    git archive bf3ac74 benchmarks/results | tar -x -C /tmp/logs
    python -m benchmarks.pretrain --logs /tmp/logs --publish

Reads every record log (`*.json`, `*.json.gz`, `*.jsonl[.gz]`; `results.json*` hold tables, not
records, and are skipped) under `--logs`: the suite workloads, Tensor Core workloads and model
tasks of the searches run on H100 and H200 machines. Records whose cost is not a positive finite
number are dropped; records of one state (same workload key, same steps) are merged into one,
at the median of their costs. At most `--per-workload` states per workload key are kept, drawn
with `--seed`; they are replayed under today's schedule space (records that no longer replay or
lower are dropped) and featurised with today's feature table. Extracting features is the slow
part (tens of ms a state): `--dataset FILE.npz` keeps the featurised programs, and a later run
with the same file reads them instead.

Then: leave-one-workload-out ranking, for each workload key with at least `--min-evaluated`
states, a model trained on every other workload (every key of the same computation left out)
ranks this one's programs (pairwise accuracy, top-5% recall); and the shipped model, trained on
all programs with one task id per workload key (throughputs normalised per task). The table goes
to `--out`/pretrained_model/, and with `--publish` to benchmarks/results/pretrained_model/ and
docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import collections
import glob
import hashlib
import json
import math
import os
import statistics
import sys
import time

import numpy as np

from benchmarks import report
from benchmarks.report import Column, Results, Table, command_line, git_commit, write_results

RECORD_PATTERNS = ("*.json", "*.json.gz", "*.jsonl", "*.jsonl.gz")


def record_logs(roots: list[str]) -> list[str]:
    """Every record log named in `roots` or found under those of them that are folders, sorted
    (tables named results.json* left out)."""
    paths = {r for r in roots if os.path.isfile(r)}
    for root in (r for r in roots if os.path.isdir(r)):
        paths |= {
            p for pat in RECORD_PATTERNS for p in glob.glob(f"{root}/**/{pat}", recursive=True)
        }
    return sorted(p for p in paths if not os.path.basename(p).startswith("results.json"))


def measured_states(paths: list[str]) -> dict[str, dict[tuple, list[float]]]:
    """{workload key: {steps: positive finite costs}} over all logs (duplicates merged)."""
    import warnings

    from autosched.records import MalformedRecordWarning, load_records

    costs: dict[str, dict[tuple, list[float]]] = collections.defaultdict(dict)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MalformedRecordWarning)  # logs of tables, not records
        for path in paths:
            for inp, res in load_records(path):
                cost = res.mean_cost
                if math.isfinite(cost) and cost > 0:
                    costs[inp.workload_key].setdefault(inp.steps, []).append(cost)
    return costs


def sampled_records(costs: dict[str, dict[tuple, list[float]]], per_workload: int, seed: int):
    """One record per state (its median cost), at most `per_workload` a workload key, drawn
    reproducibly (the draw depends on the seed and the key, not on the other keys)."""
    from autosched.records import MeasureInput, MeasureRecordResult

    out = []
    for key in sorted(costs):
        states = sorted(costs[key].items(), key=lambda item: repr(item[0]))
        digest = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)
        rng = np.random.default_rng([seed, digest])
        if len(states) > per_workload:
            states = [states[i] for i in sorted(rng.choice(len(states), per_workload, False))]
        for steps, c in states:
            out.append((MeasureInput(key, steps), MeasureRecordResult((statistics.median(c),))))
    return out


def same_workload(key: str) -> str:
    """A name shared by the workload keys of one computation (a suite key, the model-task key
    of the same DAG, its TF32 variant): its DAG's canonical text, hashed."""
    from autosched.schedule.compute_dag import ComputeDAG

    dag = ComputeDAG.from_workload_key(key)
    return hashlib.sha256(dag.canonical_text().encode()).hexdigest()[:16]


def make_model(nthread: int | None = None):
    """The model trained here: XGBModel's defaults, its trees used from the first program."""
    from autosched.search.cost_model import XGBModel

    return XGBModel(seed=0, nthread=nthread, few_shot_threshold=0)


def build_dataset(logs: list[str], per_workload: int, seed: int, n_jobs: int, cache: str | None):
    """The featurised programs and {workload key: `same_workload` name}: read from `cache` (and
    the JSON file beside it) when it exists, else built (and saved there). The names are taken
    while the logs' DAGs are known: a model task's DAG comes from its log."""
    from autosched.search.cost_model import Dataset, records_dataset

    names_path = f"{cache}.workloads.json"
    if cache and os.path.exists(cache) and os.path.exists(names_path):
        with open(names_path) as f:
            return Dataset.load(cache), json.load(f)
    paths = record_logs(logs)
    costs = measured_states(paths)
    records = sampled_records(costs, per_workload, seed)
    print(f"{len(paths)} logs, {len(costs)} workload keys, {len(records)} states to featurise")
    data = records_dataset(records, n_jobs)
    names = {key: same_workload(key) for key in costs}
    if cache:
        data.save(cache)
        with open(names_path, "w") as f:
            json.dump(names, f, indent=1)
    return data, names


def short_name(key: str) -> str:
    """A workload key as a table cell (model tasks' DAG keys stay as they are)."""
    return key.replace('"', "").replace(" ", "")


def results_of(evaluation: dict[str, dict], about: dict, argv: list[str]) -> Results:
    """The leave-one-workload-out table, the mean last."""
    columns = [
        Column("workload (left out of training)"),
        Column("its states"),
        Column("trained on", "{:,}"),
        Column("pairwise accuracy", "{:.3f}"),
        Column("top-5% in top-10%", "{:.2f}"),
    ]
    rows: list[list] = [
        [
            short_name(k),
            e["test_correct"],
            e["train"],
            e["pairwise_accuracy"],
            e["top5_in_top10_recall"],
        ]
        for k, e in evaluation.items()
    ]
    mean = float(np.mean([e["pairwise_accuracy"] for e in evaluation.values()]))
    recall = float(np.mean([e["top5_in_top10_recall"] for e in evaluation.values()]))
    rows.append(["mean", None, None, mean, recall])
    note = (
        "Each row: a model trained on every other workload's measured states (the same"
        " computation under other keys left out too) ranks this workload's states before any"
        " of them is measured; a random ranking scores 0.5 pairwise and about 0.10 recall."
        f" The shipped model is trained on all {about['programs']:,} states of"
        f" {about['workload_keys']} workload keys."
    )
    table = Table(
        "Pre-trained cost model: ranking an unseen workload",
        "CPU (records measured on H100 and H200)",
        git_commit(),
        command_line("benchmarks.pretrain", argv),
        columns,
        rows,
        note,
    )
    return Results("pretrained_model", "Start warm", [table], [{"about": about, **evaluation}])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--logs", required=True, nargs="+", help="record logs, or folders searched for them"
    )
    ap.add_argument("--per-workload", type=int, default=1500, help="states kept per workload key")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--dataset", help="featurised programs: read when present, else written")
    ap.add_argument("--min-evaluated", type=int, default=500)
    ap.add_argument("--model-out", default=None, help="default: the package's versioned file")
    ap.add_argument("--out", default="pretrain_out")
    ap.add_argument("--publish", action="store_true")
    args = sys.argv[1:] if argv is None else argv
    ns = ap.parse_args(args)
    from autosched.features import FEATURE_NAMES
    from autosched.search.cost_model import leave_one_out_ranking
    from costmodel.pretrained import PRETRAINED_FILE, save_pretrained

    t0 = time.perf_counter()
    data, names = build_dataset(ns.logs, ns.per_workload, ns.seed, ns.n_jobs, ns.dataset)
    counts = collections.Counter(data.task_ids)
    print(f"{len(data)} programs of {len(counts)} workload keys ({time.perf_counter() - t0:.0f} s)")
    evaluate = sorted(k for k, n in counts.items() if n >= ns.min_evaluated)
    evaluation = leave_one_out_ranking(make_model, data, evaluate, names.__getitem__)
    for key, e in evaluation.items():
        print(f"  {short_name(key)}: pairwise {e['pairwise_accuracy']:.3f}", flush=True)
    model = make_model()
    model.fit(data.features, data.throughputs, task_ids=data.task_ids)
    about = {"programs": len(data), "workload_keys": len(counts), "per_workload": ns.per_workload}
    save_pretrained(model, FEATURE_NAMES, ns.model_out or PRETRAINED_FILE, about)
    results = results_of(evaluation, about, args)
    write_results(results, ns.out)
    if ns.publish:
        write_results(results)
        report.main([])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
