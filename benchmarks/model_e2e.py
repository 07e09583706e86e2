"""Tune a PyTorch model end to end and compare its forward pass with PyTorch, on the GPU.

    python3 benchmarks/model_e2e.py --models mlp_b1 mlp_b64 --trials 256 --out results/

Per model: extract its tasks (`autosched.torch`), tune them over one log with the task scheduler,
compile the model with the log, check its output against eager PyTorch, then time the forward
pass of ours, eager PyTorch and `torch.compile` (default inductor) by the same method: GPU time of
100 calls captured in one CUDA graph and replayed, median of 20 (`torch_timing.time_graph`),
plus eager back-to-back calls as a second figure. Writes `<model>.json` and `results.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


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
    from model_zoo import resnet18

    return resnet18().eval(), (torch.randn(1, 3, 224, 224),)


def bert_layer_b1():
    """One BERT-base encoder layer in plain torch: batch 1, sequence 128, hidden 768, 12 heads."""
    import torch
    from model_zoo import BertLayer

    return BertLayer(768, 12, 3072).eval(), (torch.randn(1, 128, 768),)


MODELS = {
    "mlp_b1": lambda: mlp(1),
    "mlp_b64": lambda: mlp(64),
    "resnet18_b1": resnet18_b1,
    "bert_layer_b1": bert_layer_b1,
}


def run_model(name: str, trials: int, per_round: int, out: str, strategy: str) -> dict:
    import torch
    from torch_timing import time_calls, time_graph

    import autosched.torch as at
    from autosched.search.policy import SearchParams
    from autosched.search.tune_model import tune_tasks

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--trials", type=int, default=256, help="trials per model, all tasks")
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--strategy", default="gradient", choices=("gradient", "round-robin"))
    ap.add_argument("--out", default="model_out")
    ns = ap.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    lines = [
        "| model | ours µs | eager µs | torch.compile µs | eager calls µs: ours / eager / "
        "compile | matches | tuning s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ns.models:
        r = run_model(name, ns.trials, ns.per_round, ns.out, ns.strategy)
        lines.append(
            f"| {name} | {r['ours_us']:.1f} | {r['eager_us']:.1f} | {r['inductor_us']:.1f} | "
            f"{r['ours_eager_us']:.1f} / {r['eager_eager_us']:.1f} / "
            f"{r['inductor_eager_us']:.1f} | {'yes' if r['matches_eager'] else 'NO'} | "
            f"{r['tuning_s']:.0f} |"
        )
        with open(os.path.join(ns.out, "results.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
