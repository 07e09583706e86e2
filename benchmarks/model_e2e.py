"""Tune PyTorch models end to end and compare their forward pass with PyTorch, on the GPU.

    python -m benchmarks.model_e2e --models resnet50 mobilenet_v2 --minutes 4 --out runs/ \
        [--batches 1 large] [--dtypes float32 float16] [--publish]

Per model (`model_zoo.MODELS`), batch (1 and the model's larger batch) and precision: extract its
tasks (`autosched.torch`), time each task's subgraph in PyTorch (the fallback costs of the
estimate), tune the tasks over one log with the task scheduler within `--minutes` and/or
`--trials`, compile the model with the log, check its output against eager PyTorch, then time
the forward pass of ours, eager PyTorch and `torch.compile` (default mode) by the same method:
GPU time of 100 calls captured in one CUDA graph and replayed, median of 20
(`timing.time_graph`). float32 follows PyTorch's TF32 flags as they are set (recorded per row).
A configuration that fails (a model the front end cannot trace yet) records its error and the
run goes on. Writes `<config>.json` and one table per model (OUT/models/results.json and .md;
with `--publish`, benchmarks/results/models/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass

from benchmarks import report
from benchmarks.report import (
    Column,
    Results,
    Table,
    write_results,
)

DTYPES = ("float32", "float16")
PUBLISHED = ("resnet50", "mobilenet_v2", "vit_b_16", "bert_base")  # the models run by default


@dataclass(frozen=True)
class Config:
    """One measured configuration: a model of `model_zoo.MODELS`, a batch, a precision."""

    model: str
    batch: int
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.model}_b{self.batch}_{self.dtype}"


def configs(models: list[str], batches: list[str], dtypes: list[str]) -> list[Config]:
    """Every (model, batch, precision); a batch is a number or "large" (the model's own)."""
    from benchmarks.model_zoo import MODELS

    out = []
    for name in models:
        sizes = [MODELS[name].large_batch if b == "large" else int(b) for b in batches]
        out += [Config(name, b, d) for b in dict.fromkeys(sizes) for d in dtypes]
    return out


def prepared(config: Config, device: str):
    """(model, inputs) of a configuration in its precision on `device` (integer inputs, token
    ids, stay integers)."""
    import torch

    from benchmarks.model_zoo import MODELS

    model, inputs = MODELS[config.model].build(config.batch)
    dtype = getattr(torch, config.dtype)
    model = model.to(device=device, dtype=dtype)
    inputs = tuple(
        x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device) for x in inputs
    )
    return model, inputs


def flop_coverage(model, inputs, tasks) -> float:
    """The share of the model's FLOPs in its tasks: the tasks' FLOPs (weighted, epilogues
    included) over PyTorch's count of the model's (`FlopCounterMode`: matmuls and
    convolutions), at most 1."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(*inputs)
    total = counter.get_total_flops()
    ours = sum(t.weight * t.flop for t in tasks)
    return min(1.0, ours / total) if total else 1.0


def run_config(config: Config, trials: int | None, minutes: float | None, ns) -> dict:
    """Tune and time one configuration; its row (figures, or the error that stopped it)."""
    row: dict = {"model": config.model, "batch": config.batch, "dtype": config.dtype}
    try:
        row.update(_tune_and_time(config, trials, minutes, ns))
    except Exception as exc:
        traceback.print_exc()
        row["error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    with open(os.path.join(ns.out, f"{config.name}.json"), "w") as f:
        json.dump(row, f, indent=1, default=str)
    return row


def _tune_and_time(config: Config, trials: int | None, minutes: float | None, ns) -> dict:
    import torch

    import autosched.torch as at
    from autosched.search.policy import SearchParams
    from autosched.search.pytorch_times import subgraph_times
    from autosched.search.tune_model import tune_tasks
    from benchmarks.timing import time_graph

    model, inputs = prepared(config, "cuda")
    tasks = at.extract_tasks(model, inputs)
    at.print_tasks(tasks)
    fallback = subgraph_times(tasks, inputs)
    log = os.path.join(ns.out, f"{config.name}.log.json")
    search_tasks, weights = at.tasks_and_weights(tasks)
    t0 = time.perf_counter()
    result = tune_tasks(
        search_tasks,
        weights,
        log,
        trials,
        time_budget_s=None if minutes is None else 60.0 * minutes,
        fallback_costs=fallback,
        num_measures_per_round=ns.per_round,
        strategy=ns.strategy,
        search_params=SearchParams(n_jobs=os.cpu_count() or 1),
        parallel_tasks=ns.parallel_tasks,
    )
    tuning_s = time.perf_counter() - t0
    ours = at.compile(model, inputs, log=log)
    inductor = torch.compile(model)
    with torch.no_grad():
        want = model(*inputs)
        got = ours(*inputs)
        torch.cuda.synchronize()
        err = float((got - want).abs().max()) / (float(want.abs().max()) or 1.0)
        figures = {
            f"{label}_us": time_graph([lambda fn=fn: fn(*inputs)]) * 1e6
            for label, fn in (("ours", ours), ("eager", model), ("inductor", inductor))
        }
        coverage = flop_coverage(model, inputs, tasks)
    tolerance = 1e-3 if config.dtype == "float32" else 2e-2
    return {
        "tasks": [{"name": t.name, "weight": t.weight, "gflop": t.flop / 1e9} for t in tasks],
        "tasks_tuned": len(tasks) - len(result.fallback_tasks),
        "trials": result.total_trials,
        "trials_per_task": result.trials,
        "trials_per_s": result.trials_per_s,
        "fallback_us": [c * 1e6 for c in fallback],
        "estimated_latency_us": result.latency * 1e6,
        "estimated_at_third_us": estimate_at(result.history, result.tuning_s / 3),
        "curve": [(r["elapsed_s"], r["total_trials"], r["latency_us"]) for r in result.history],
        "tuning_s": tuning_s,
        "rounds": len(result.history),
        "flop_coverage": coverage,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "max_rel_err_vs_eager": err,
        "matches_eager": err <= tolerance,
        **figures,
    }


def estimate_at(history: list[dict], seconds: float) -> float | None:
    """The scheduler's estimated latency (µs) after the last round that ended within `seconds`
    of the start: what a run that many seconds long would have reached, about (None before
    any round ended)."""
    ended = [r["latency_us"] for r in history if r["elapsed_s"] <= seconds]
    return ended[-1] if ended else None


COLUMNS = [
    Column("batch"),
    Column("precision"),
    Column("tasks tuned"),
    Column("FLOPs in tasks", "{:.0%}"),
    Column("trials"),
    Column("tuning s", "{:.0f}"),
    Column("ours µs", "{:.1f}"),
    Column("eager µs", "{:.1f}"),
    Column("torch.compile µs", "{:.1f}"),
    Column("eager / ours", "{:.2f}"),
    Column("torch.compile / ours", "{:.2f}"),
    Column("estimated µs", "{:.1f}"),
    Column("at ⅓ of the time", "{:.1f}"),
    Column("matches eager"),
    Column("error"),
]
NOTE = (
    "Forward pass, GPU time by CUDA graph replay. ours: the model compiled with its tuned log"
    " (`autosched.torch.compile`), our kernels for the tuned tasks and PyTorch for the rest;"
    " torch.compile: default mode. float32 follows PyTorch's TF32 flags as set (by default"
    " TF32 for cuDNN's convolutions, not for matmuls; `tf32_*` in the runs)."
    " tasks tuned: tasks with a kernel / tasks; FLOPs in tasks: the tasks' share of the model's"
    " FLOPs; estimated: the task scheduler's weighted sum of its tasks' best times, a task"
    " without a kernel at its PyTorch time; at ⅓ of the time: that estimate when a third of the"
    " tuning time had passed (a run a third as long, about)."
)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _tasks_tuned(run: dict) -> str | None:
    """ "tuned / tasks" of a run that got as far as tuning."""
    if "tasks_tuned" not in run:
        return None
    return f"{run['tasks_tuned']} / {len(run.get('tasks', []))}"


def model_row(run: dict) -> list:
    """A run's cells under COLUMNS (blank where it failed before the figure)."""
    return [
        run["batch"],
        run["dtype"],
        _tasks_tuned(run),
        run.get("flop_coverage"),
        run.get("trials"),
        run.get("tuning_s"),
        run.get("ours_us"),
        run.get("eager_us"),
        run.get("inductor_us"),
        _ratio(run.get("eager_us"), run.get("ours_us")),
        _ratio(run.get("inductor_us"), run.get("ours_us")),
        run.get("estimated_latency_us"),
        run.get("estimated_at_third_us"),
        run.get("matches_eager"),
        run.get("error", ""),
    ]


SUMMARY_COLUMNS = [
    Column("model"),
    Column("batch"),
    Column("precision"),
    Column("tasks tuned"),
    Column("tuning min", "{:.1f}"),
    Column("ours µs", "{:.1f}"),
    Column("eager µs", "{:.1f}"),
    Column("torch.compile µs", "{:.1f}"),
    Column("torch.compile / ours", "{:.2f}"),
    Column("matches eager"),
    Column("commit"),
]


def summary_table(runs: list[dict]) -> Table:
    """Every configuration in one table (the per-model tables below give the details)."""
    rows = []
    for run in runs:
        tuning_s = run.get("tuning_s")
        rows.append(
            [
                run["model"],
                run["batch"],
                run["dtype"],
                _tasks_tuned(run),
                None if tuning_s is None else tuning_s / 60,
                run.get("ours_us"),
                run.get("eager_us"),
                run.get("inductor_us"),
                _ratio(run.get("inductor_us"), run.get("ours_us")),
                run.get("matches_eager"),
                run.get("commit"),
            ]
        )
    machines = ", ".join(sorted({r.get("machine", "?") for r in runs}))
    commits = ", ".join(sorted({r.get("commit", "?") for r in runs}))
    note = (
        "ours: the model compiled with its tuned log; torch.compile: default mode; GPU time by"
        " CUDA graph replay. A ratio under 1: torch.compile is faster."
    )
    return Table(
        "All models",
        machines,
        commits,
        "the commands of the tables below",
        SUMMARY_COLUMNS,
        rows,
        note,
    )


def model_results(runs: list[dict]) -> Results:
    """The models folder's document: all configurations in one table, then one table per
    model, machine, commit and command."""
    tables = [summary_table(runs)] if len({r["model"] for r in runs}) > 1 else []
    groups = report.runs_by(runs, "model", "machine", "commit", "command")
    for (model, where, commit, command), group in groups.items():
        title = f"{model}: {_budget(group[0])}"
        rows = [model_row(r) for r in group]
        tables.append(Table(title, where, commit, command, COLUMNS, rows, NOTE))
    return Results("models", "Whole models against PyTorch", tables, runs)


def _budget(run: dict) -> str:
    parts = []
    if run.get("minutes") is not None:
        parts.append(f"{run['minutes']:g} minutes")
    if run.get("budget_trials") is not None:
        parts.append(f"{run['budget_trials']} trials")
    return " or ".join(parts) + " of tuning per configuration"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.model_zoo import MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(PUBLISHED), choices=list(MODELS))
    ap.add_argument(
        "--batches", nargs="*", default=["1", "large"], help='batch sizes; "large": the model\'s'
    )
    ap.add_argument("--dtypes", nargs="*", default=list(DTYPES), choices=DTYPES)
    ap.add_argument("--minutes", type=float, default=None, help="tuning time per configuration")
    ap.add_argument("--trials", type=int, default=None, help="trials per configuration")
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--strategy", default="gradient", choices=("gradient", "round-robin"))
    ap.add_argument(
        "--parallel-tasks", type=int, default=None, help="default: two per GPU and five more"
    )
    report.add_publishing_arguments(ap, "models", "model_out")
    ns = ap.parse_args(argv)
    if ns.minutes is None and ns.trials is None:
        ap.error("give --minutes, --trials or both")
    os.makedirs(ns.out, exist_ok=True)
    where = {
        **report.provenance("benchmarks.model_e2e", ns.commit, argv),
        "minutes": ns.minutes,
        "budget_trials": ns.trials,
    }
    runs = []
    for config in configs(ns.models, ns.batches, ns.dtypes):
        runs.append({**run_config(config, ns.trials, ns.minutes, ns), **where})
        write_results(model_results(runs), root=ns.out)  # a run cut short keeps what it measured
    report.finish(model_results(runs), ns.publish)
    return 0


if __name__ == "__main__":
    sys.exit(main())
