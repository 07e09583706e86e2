"""Tune a PyTorch model end to end and compare its forward pass with PyTorch, on the GPU.

    python -m benchmarks.model_e2e --models mlp_b1 mlp_b64 --trials 256 --out runs/ [--publish]

Per model: extract its tasks (`autosched.torch`), tune them over one log with the task scheduler,
compile the model with the log, check its output against eager PyTorch, then time the forward
pass of ours, eager PyTorch and `torch.compile` (default inductor) by the same method: GPU time of
100 calls captured in one CUDA graph and replayed, median of 20 (`timing.time_graph`),
plus eager back-to-back calls as a second figure. Writes `<model>.json` and the tables
(OUT/models/results.json and .md; with `--publish`, benchmarks/results/models/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks import report
from benchmarks.report import (
    Column,
    Results,
    Table,
    command_line,
    git_commit,
    machine,
    write_results,
)


def mlp(batch: int):
    """The seed tutorial's MLP: 784 -> 128 -> 10 with relu."""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).eval()
    return model, (torch.randn(batch, 784),)


def resnet18_b1():
    """ResNet-18 (torchvision's BasicBlock layout, written here without torchvision), batch 1,
    224x224: conv7x7/2 + BN + ReLU, maxpool 3x3/2, 4 stages of 2 BasicBlocks, avgpool, fc."""
    import torch

    from benchmarks.model_zoo import resnet18

    return resnet18().eval(), (torch.randn(1, 3, 224, 224),)


def bert_layer_b1():
    """One BERT-base encoder layer in plain torch: batch 1, sequence 128, hidden 768, 12 heads."""
    import torch

    from benchmarks.model_zoo import BertLayer

    return BertLayer(768, 12, 3072).eval(), (torch.randn(1, 128, 768),)


MODELS = {
    "mlp_b1": lambda: mlp(1),
    "mlp_b64": lambda: mlp(64),
    "resnet18_b1": resnet18_b1,
    "bert_layer_b1": bert_layer_b1,
}


def run_model(name: str, trials: int, per_round: int, out: str, strategy: str) -> dict:
    import torch

    import autosched.torch as at
    from autosched.search.policy import SearchParams
    from autosched.search.tune_model import tune_tasks
    from benchmarks.timing import time_calls, time_graph

    model, inputs = MODELS[name]()
    tasks = at.extract_tasks(model, inputs)
    at.print_tasks(tasks)
    log = os.path.join(out, f"{name}.log.json")
    search_tasks, weights = at.tasks_and_weights(tasks)
    t0 = time.perf_counter()
    result = tune_tasks(
        search_tasks,
        weights,
        log,
        trials,
        num_measures_per_round=per_round,
        strategy=strategy,
        search_params=SearchParams(n_jobs=os.cpu_count() or 1),
    )
    tuning_s = time.perf_counter() - t0

    model, inputs = model.cuda(), tuple(x.cuda() for x in inputs)
    ours = at.compile(model, inputs, log=log)
    inductor = torch.compile(model)
    with torch.no_grad():
        want = model(*inputs)
        got = ours(*inputs)
        torch.cuda.synchronize()
        err = float((got - want).abs().max()) / (float(want.abs().max()) or 1.0)
        figures = {}
        for label, fn in (("ours", ours), ("eager", model), ("inductor", inductor)):
            call = [lambda fn=fn: fn(*inputs)]
            figures[f"{label}_us"] = time_graph(call) * 1e6
            figures[f"{label}_eager_us"] = time_calls(call) * 1e6
    row = {
        "model": name,
        "tasks": [{"name": t.name, "weight": t.weight, "gflop": t.flop / 1e9} for t in tasks],
        "trials_per_task": getattr(result, "trials", None),
        "estimated_latency_us": result.latency * 1e6,
        "tuning_s": tuning_s,
        "max_rel_err_vs_eager": err,
        "matches_eager": err <= 1e-3,
        **figures,
    }
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(row, f, indent=1, default=str)
    return row


COLUMNS = [
    Column("model"),
    Column("tasks"),
    Column("ours µs", "{:.1f}"),
    Column("eager PyTorch µs", "{:.1f}"),
    Column("torch.compile µs", "{:.1f}"),
    Column("eager calls µs: ours / eager / compile"),
    Column("estimated µs", "{:.1f}"),
    Column("matches eager"),
    Column("tuning s", "{:.0f}"),
]
NOTE = (
    "Forward pass, fp32. ours: the model compiled with its tuned log (`autosched.torch.compile`),"
    " our kernels on PyTorch's stream; torch.compile: the default inductor backend; eager calls:"
    " CUDA events around 100 back-to-back calls (host cost included); estimated: the task"
    " scheduler's sum of its tasks' best times, weighted."
)


def model_results(runs: list[dict]) -> Results:
    """The models folder's document: one table per machine, commit and trial budget."""
    tables = []
    groups = report.runs_by(runs, "machine", "commit", "trials", "command")
    for (where, commit, trials, command), group in groups.items():
        rows = [
            [
                r["model"],
                len(r["tasks"]),
                r["ours_us"],
                r["eager_us"],
                r["inductor_us"],
                f"{r['ours_eager_us']:.1f} / {r['eager_eager_us']:.1f}"
                f" / {r['inductor_eager_us']:.1f}",
                r["estimated_latency_us"],
                r["matches_eager"],
                r["tuning_s"],
            ]
            for r in group
        ]
        title = f"{trials} trials per model, all tasks"
        tables.append(Table(title, where, commit, command, COLUMNS, rows, NOTE))
    return Results("models", "Whole models against PyTorch", tables, runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--trials", type=int, default=256, help="trials per model, all tasks")
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--strategy", default="gradient", choices=("gradient", "round-robin"))
    ap.add_argument("--out", default="model_out", help="logs; the tables go to OUT/models/")
    ap.add_argument(
        "--publish",
        action="store_true",
        help="also write the tables to benchmarks/results/models/ and docs/PERFORMANCE.md",
    )
    ns = ap.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    where = {
        "machine": machine(),
        "commit": git_commit(),
        "trials": ns.trials,
        "command": command_line("benchmarks.model_e2e", sys.argv[1:] if argv is None else argv),
    }
    runs = []
    for name in ns.models:
        runs.append({**run_model(name, ns.trials, ns.per_round, ns.out, ns.strategy), **where})
        write_results(model_results(runs), root=ns.out)  # a run cut short keeps what it measured
    results = model_results(runs)
    if ns.publish:
        write_results(results)
        report.main([])
    print(results.markdown(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
