"""Tune suite workloads and compare the best kernels with PyTorch on the GPU, in one run.

    python -m benchmarks.run --workloads conv2d_bias_relu matmul --trials 256 --out runs/
    python -m benchmarks.run --workloads matmul --trials 256 --seeds 0 1 2 --out spread/
    python -m benchmarks.run --trials 1000 --publish          # the published operator table
    python -m benchmarks.run --merge queue_out/ --publish     # searches run by run_queue

Per workload: tune, then time the best kernel and PyTorch (fp32 with TF32 off, and TF32) in this
process by the same methods (`benchmarks.timing`, inputs rotated past the L2 cache, median of
repeats): GPU time from CUDA graph replays of 100 calls (the headline columns, no host launch
cost) and eager back-to-back calls between CUDA events (a second column: for small operators,
host dispatch), after checking our output against PyTorch's on the same inputs. Record logs and
kernels go to OUT; the tables (`benchmarks.suite_tables`) to OUT/operators/results.json and
results.md, rewritten after each workload, and with `--publish` to
benchmarks/results/operators/ and docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from benchmarks import report
from benchmarks.report import Results, command_line, git_commit, machine, write_results
from benchmarks.suite_tables import operator_results, runs_below

FP32_PEAK_TFLOPS = 67.0  # H100/H200 FFMA datasheet figure (ANCHORS.md)


def tune(
    name: str,
    trials: int,
    per_round: int,
    population: int | None,
    n_jobs: int,
    out: str,
    seed: int = 0,
    generations: int | None = None,
    pretrain: tuple = (),
    few_shot: int | None = None,
    prior: tuple = (),
    search_params: dict | None = None,
    model_params: dict | None = None,
    sketch_params: dict | None = None,
):
    """Tune one suite workload; returns (task, TuningResult, wall seconds). `pretrain`: Datasets
    (`cost_model.load_dataset`) whose programs of other tasks train the model before the first
    round (transfer learning; the task's own programs in them are left out). `prior`: Datasets
    whose programs of other tasks join the model's training from its first update on
    (`XGBModel.add_prior`: the first round stays random). `few_shot`: the
    model's `few_shot_threshold` (None: XGBParams' default). `search_params`: more SearchParams
    fields by name; `model_params`: XGBParams fields by name; `sketch_params`: SketchParams
    fields by name (over the task's own)."""
    import autosched
    from autosched.search.cost_model import Dataset, shipped_model
    from autosched.search.policy import SearchParams, SketchPolicy
    from autosched.sketch import SketchParams
    from autosched.task.search_task import suite_task

    task = suite_task(name)
    given = {"population": population, "generations": generations, **(search_params or {})}
    params = SearchParams(
        n_jobs=n_jobs, seed=seed, **{k: v for k, v in given.items() if v is not None}
    )
    model_settings = dict(model_params or {})
    if few_shot is not None:
        model_settings["few_shot_threshold"] = few_shot
    # the model a user's search starts with: the shipped pre-trained one unless turned off
    # (`--param pretrained=False`); note that it was trained on earlier logs of these workloads
    model = autosched.XGBModel(
        **model_settings, pretrained=shipped_model() if params.pretrained else None
    )
    t0 = time.perf_counter()
    own = [task.workload_key]
    others = Dataset.joined([d.without_tasks(own) for d in pretrain])
    if len(others):  # one training run on all of them (each update retrains from scratch)
        model.update(others.features, others.throughputs, task_ids=others.task_ids)
    priors = Dataset.joined([d.without_tasks(own) for d in prior])
    if len(priors):
        model.add_prior(priors.features, priors.throughputs, task_ids=priors.task_ids)
    sketch = dataclasses.replace(SketchParams.for_task(task), **(sketch_params or {}))
    policy = SketchPolicy(task, model, params, sketch_params=sketch)
    res = autosched.auto_schedule(
        task,
        policy,
        autosched.TuningOptions(
            num_measure_trials=trials,
            num_measures_per_round=per_round,
            measure_callbacks=[autosched.RecordToFile(os.path.join(out, f"{name}.json"))],
        ),
    )
    return task, res, time.perf_counter() - t0


def row(name: str, task, res, wall: float) -> dict:
    """Time the best kernel beside PyTorch (same process, same inputs, same method), after a
    fresh runner has read it again as the search did (`reread_us`: a record that the re-read
    and the benchmark both miss was taken in another launch state, measure.launch_state)."""
    from benchmarks.agreement import runner_reading
    from benchmarks.timing import compare_with_torch

    wl, args = _name_args(task)
    try:
        reread_us = runner_reading(task, res.kernel) * 1e6
    except RuntimeError as err:  # the row still gets its benchmark times
        print(f"{name}: the runner could not read the best again: {err}", flush=True)
        reread_us = None
    cmp = compare_with_torch(wl, args, res.kernel)
    flop, h = task.compute_dag.flop_count, res.history
    ours = cmp["ours_us"] * 1e-6
    return {
        "workload": name,
        "flop": flop,
        **cmp,
        "record_us": res.best_cost * 1e6,  # the runner's time of the same kernel, to compare
        "reread_us": reread_us,
        "ratio_vs_fp32": cmp["ours_us"] / cmp["torch_fp32_us"],
        "gflops": flop / ours / 1e9,
        "pct_fp32_peak": 100 * flop / ours / 1e12 / FP32_PEAK_TFLOPS,
        "trials": h[-1]["trials"] if h else 0,
        "wall_s": wall,
        "search_s": sum(r["search_s"] for r in h),
        "measure_s": sum(r["measure_s"] for r in h),
        "model_s": sum(r["model_s"] for r in h),
    }


def _name_args(task):
    key = json.loads(task.workload_key)
    return key[0], tuple(key[1:])


def main(argv: list[str] | None = None) -> int:
    from autosched.search.policy import SearchParams
    from autosched.task.workloads import SUITE

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="*", default=list(SUITE), choices=list(SUITE))
    ap.add_argument(
        "--trials", type=int, default=192, help="per workload (default fits the suite in ~10 min)"
    )
    ap.add_argument("--per-round", type=int, default=64)
    defaults = SearchParams()
    ap.add_argument(
        "--population",
        type=int,
        default=None,
        help=f"default: SearchParams' ({defaults.population})",
    )
    ap.add_argument(
        "--generations",
        type=int,
        default=None,
        help=f"default: SearchParams' ({defaults.generations})",
    )
    ap.add_argument(
        "--few-shot",
        type=int,
        default=None,
        help="programs measured before the cost model steers the search (default: XGBParams')",
    )
    ap.add_argument(
        "--pretrain",
        nargs="+",
        default=[],
        help="record logs whose programs of other workloads train the cost model first",
    )
    ap.add_argument(
        "--prior",
        nargs="+",
        default=[],
        help="record logs (or .npz datasets, cost_model.read_dataset) whose programs of other"
        " workloads join the cost model's training after the first (random) round",
    )
    ap.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=search_param,
        help="set any SearchParams field, e.g. --param eps_greedy=0.1 or --param "
        "mutation_weights=tile_size:0.7,auto_unroll:0.2,crossover:0.1 (repeatable)",
    )
    ap.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=model_param,
        help="set an XGBParams field of the cost model, e.g. --model max_depth=8",
    )
    ap.add_argument(
        "--sketch",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=sketch_param,
        help="set a SketchParams field (sketch rules and random annotation), e.g. --sketch"
        " shared_padding_probability=0.25",
    )
    ap.add_argument(
        "--n-jobs", type=int, default=None, help="default: the cores this process may use"
    )
    ap.add_argument(
        "--out",
        default="bench_out",
        help="record logs and kernels; the tables go to OUT/operators/results.{json,md}",
    )
    ap.add_argument(
        "--publish",
        action="store_true",
        help="also write the tables to benchmarks/results/operators/ and docs/PERFORMANCE.md",
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="FOLDER",
        help="tune nothing: gather the runs of every operators/results.json below FOLDERs (a"
        " queue of searches, benchmarks.run_queue) into one document",
    )
    ap.add_argument(
        "--commit", default=None, help="commit to name in the table (default: git HEAD)"
    )
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="the search's seeds (runs differ by seed: compare several); with more than one,"
        " each seed's logs go to OUT/seedS/ and the table shows the spread per workload",
    )
    ns = ap.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    if ns.merge is not None:
        publish(operator_results(runs_below(ns.merge)), ns.out, ns.publish)
        return 0

    from autosched.search.cost_model import load_dataset, read_dataset
    from autosched.search.workers import resolve_n_jobs

    ns.n_jobs = resolve_n_jobs(ns.n_jobs)
    where = {"machine": machine(), "commit": ns.commit or git_commit()}
    pretrain = tuple(load_dataset(path, ns.n_jobs) for path in ns.pretrain)
    prior = tuple(read_dataset(path, ns.n_jobs) for path in ns.prior)
    runs: list[dict] = []
    for seed in ns.seeds:
        out = ns.out if len(ns.seeds) == 1 else os.path.join(ns.out, f"seed{seed}")
        os.makedirs(out, exist_ok=True)
        for name in ns.workloads:
            task, res, wall = tune(
                name,
                ns.trials,
                ns.per_round,
                ns.population,
                ns.n_jobs,
                out,
                seed,
                ns.generations,
                pretrain,
                ns.few_shot,
                prior,
                dict(ns.param),
                dict(ns.model),
                dict(ns.sketch),
            )
            run = row(name, task, res, wall)
            command = command_line("benchmarks.run", sys.argv[1:] if argv is None else argv)
            run.update(seed=seed, planned_trials=ns.trials, command=command, **where)
            runs.append(run)
            with open(os.path.join(out, f"{name}.cu"), "w") as f:
                f.write(res.kernel.source)
            # rewritten after each workload, so that a run cut short keeps what it measured
            publish(operator_results(runs), ns.out, publish_too=False)
    if ns.publish:
        publish(operator_results(runs), ns.out, publish_too=True)
    return 0


def publish(results: Results, out: str, publish_too: bool) -> None:
    """Write the document to OUT/operators/ (and with `publish_too` to the repository's
    results folder and docs/PERFORMANCE.md); print its Markdown."""
    write_results(results, root=out)
    if publish_too:
        write_results(results)
        report.main([])
    print(results.markdown(), flush=True)


def search_param(text: str) -> tuple[str, object]:
    """NAME=VALUE for a SearchParams field, the value converted to the type of its default."""
    from autosched.search.policy import SearchParams

    own_flags = {"seed", "n_jobs", "population", "generations"}  # set by --seeds, --n-jobs, ...
    return field_setting(text, SearchParams, own_flags)


def model_param(text: str) -> tuple[str, object]:
    """NAME=VALUE for an XGBParams field (the cost model's settings)."""
    from costmodel import XGBParams

    return field_setting(text, XGBParams, {"few_shot_threshold"})  # set by --few-shot


def sketch_param(text: str) -> tuple[str, object]:
    """NAME=VALUE for a SketchParams field (sketch rules and random annotation)."""
    from autosched.sketch import SketchParams

    return field_setting(text, SketchParams, {"allow_tf32"})  # the task's own option


def field_setting(text: str, params_class, own_flags: set) -> tuple[str, object]:
    """NAME=VALUE for a field of a params dataclass, the value converted to the type of its
    default (a tuple of numbers is written comma-separated, e.g. `auto_unroll_configs=64,512`);
    fields set by flags of their own are refused."""
    name, sep, value = text.partition("=")
    fields = [f.name for f in dataclasses.fields(params_class) if f.name not in own_flags]
    if not sep or name not in fields:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with NAME one of {', '.join(fields)}, got {text!r}"
        )
    default = getattr(params_class(), name)
    if default and isinstance(default, tuple) and all(isinstance(x, tuple) for x in default):
        return name, named_numbers(name, value, type(default[0][1]))
    numbers = bool(default) and isinstance(default, tuple)
    numbers = numbers and all(isinstance(x, (int, float)) for x in default)
    if not numbers and not isinstance(default, (int, float, str)):
        raise argparse.ArgumentTypeError(f"{name} is not a number, a string or numbers")
    try:
        if numbers:
            return name, tuple(type(default[0])(x) for x in value.split(","))
        return name, type(default)(value)
    except ValueError:
        kind = type(default[0] if numbers else default).__name__
        kind = f"comma-separated {kind}s" if numbers else f"a {kind}"
        raise argparse.ArgumentTypeError(f"{name} takes {kind}, got {value!r}") from None


def named_numbers(name: str, value: str, kind: type) -> tuple[tuple[str, object], ...]:
    """A setting of (name, number) pairs written `a:1,b:0.5` (e.g. `mutation_weights`)."""
    pairs = []
    for item in value.split(","):
        key, _, number = item.partition(":")
        try:
            if not key:
                raise ValueError(item)
            pairs.append((key, kind(number)))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} takes comma-separated NAME:{kind.__name__} pairs, got {item!r}"
            ) from None
    return tuple(pairs)


if __name__ == "__main__":
    sys.exit(main())
