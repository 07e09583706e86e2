"""How well AutoUnroll's register estimate predicts spills: compile states at every unroll depth
with ptxas, no GPU needed.

    python3 benchmarks/unroll_budget.py --workloads batch_matmul conv2d_7x7s2 --count 40 \
        [--logs LOG ...] [--fast 20] [--out FILE.md] [--json FILE.json]

AutoUnroll draws a tiled stage's `auto_unroll_max_step` only from the configs whose estimated
registers (accumulators plus the unrolled nest's operand tiles) fit the per-thread budget. For
`count` fresh states per workload, and for the `fast` fastest distinct states of the given record
logs, every config is set in turn, the kernel generated and compiled for sm_90 by the builder
(NVRTC when found, else nvcc; the spill limit raised so that nothing is rejected for spilling),
and ptxas's spill bytes compared with the estimate's verdict. Printed per workload: for fresh
states, how many depths the estimate rejects and admits that spill or compile clean; for the
logs' fastest states, how many measured depths the estimate would not have drawn.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # spill_rate, beside it


def plan_of(state, plans):
    """The sketch plan a complete state was drawn from: the plan whose sketch's steps are the
    state's first steps, step kind and stage alike (the init rules fill in lengths and append
    annotations)."""

    def shape(steps):
        return [(type(s).__name__, s.stage_id) for s in steps]

    for plan in plans:
        head = shape(plan.sketch.steps)
        if shape(state.steps[: len(head)]) == head:
            return plan
    return None


def estimate(state, plans, ctx, depth: int) -> tuple[int, int] | None:
    """(estimated registers, budget) of the state's first tiled stage unrolled to `depth`, as
    AutoUnroll judges it; None when the state has no tiled stage."""
    from autosched.sketch.init_rules import AutoUnroll

    plan = plan_of(state, plans)
    if plan is None or not plan.groups:
        return None
    g = plan.groups[0]
    return AutoUnroll.unrolled_registers(g, state)(depth), AutoUnroll.budget(ctx, g, state)


def unroll_depths(records) -> list[int]:
    """The depths of the records' auto_unroll pragmas, in order."""
    from autosched.search.mutations import as_step, is_unroll_pragma

    return [as_step(r).parsed()[1] for r in records if is_unroll_pragma(r)]


def with_unroll(records, depth: int):
    """The records with every auto_unroll pragma set to `depth`."""
    from autosched.search.mutations import AUTO_UNROLL, is_unroll_pragma

    return tuple(
        r[:-1] + (f"{AUTO_UNROLL}${depth}",) if is_unroll_pragma(r) else r for r in records
    )


def suite_sampling(name: str):
    """(task, sampler, context) of a suite workload: its sketches' plans and init context
    (unverified sampling) and the replay of records."""
    from autosched.compat import generate_sketches
    from autosched.search.workers import TaskContext
    from autosched.sketch import SketchSampler
    from autosched.task.search_task import suite_task

    task = suite_task(name)
    return task, SketchSampler(generate_sketches(task), verify=False), TaskContext(task.compute_dag)


def logged_times(logs: list[str]) -> dict[str, dict[tuple, float]]:
    """workload key -> {records: fastest µs} over the correct records of the logs (each log
    read once)."""
    from autosched.records import load_records
    from autosched.search.policy import as_records

    times: dict[str, dict[tuple, float]] = collections.defaultdict(dict)
    for path in logs:
        for inp, res in load_records(path):
            if res.ok:
                best = times[inp.workload_key]
                key = as_records(inp.steps)
                best[key] = min(best.get(key, float("inf")), res.mean_cost * 1e6)
    return times


def rows_for(name: str, count: int, logged: dict, n_fast: int, rng, builder) -> list:
    """One dict per (state, depth) of one workload: origin, measured µs (log states), the depth
    the state had, the estimate's verdict, registers and spill bytes."""
    from spill_rate import compile_report

    from autosched.codegen.build import build
    from autosched.search.policy import as_records

    task, sampler, context = suite_sampling(name)
    states = [("fresh", None, as_records(s.key())) for s in sampler.sample(count, rng)]
    times = logged.get(task.workload_key, {})
    fast = sorted((t, r) for r, t in times.items())[:n_fast]
    states += [("fastest logged", t, r) for t, r in fast]
    items, artifacts = [], []
    for origin, us, records in states:
        depths = unroll_depths(records)
        for depth in sampler.ctx.params.auto_unroll_configs:
            try:
                state = context.replay(with_unroll(records, depth))
                verdict = estimate(state, sampler.plans, sampler.ctx, depth)
                if verdict is None:
                    continue
                artifacts.append(build(task.compute_dag, state).artifact(tag=name))
            except Exception:  # a record of an older schedule space
                continue
            items.append(
                {
                    "workload": name,
                    "origin": origin,
                    "us": us,
                    "own_depth": depths[0] if depths else None,
                    "depth": depth,
                    "estimate": verdict[0],
                    "budget": verdict[1],
                }
            )
    for item, res in zip(items, builder.build(artifacts), strict=True):
        item.update(compile_report(res))
    return items


def over_budget(context, plans, ctx, records) -> bool | None:
    """Whether a state's unroll depth is one the estimate rejects (None: it does not replay or
    has no tiled stage)."""
    depths = unroll_depths(records)
    try:
        state = context.replay(records)
    except Exception:  # a record of an older schedule space
        return None
    verdict = estimate(state, plans, ctx, depths[0]) if depths else None
    return None if verdict is None else verdict[0] > verdict[1]


def runs_table(names: list[str], logs: list[str], trials: int, first_round: int = 64) -> str:
    """Per workload, over the logs of `trials` records (one search each): the share of measured
    states whose depth the estimate rejects in the first round (fresh samples) and after (the
    model's picks, mutations included), and the runs' best µs by whether their best state has
    such a depth."""
    from autosched.records import load_records
    from autosched.search.policy import as_records

    lines = [
        f"| workload | runs of {trials} | rejected depths: first round / after |"
        " runs whose best has one: count, mean best µs | the other runs: count, mean best µs |",
        "|---|---|---|---|---|",
    ]
    runs: dict[str, list] = collections.defaultdict(list)
    for path in logs:
        records = list(load_records(path))
        if len(records) == trials:
            runs[records[0][0].workload_key].append(records)
    for name in names:
        task, sampler, context = suite_sampling(name)
        shares = {True: [], False: []}  # first round?
        bests = {True: [], False: []}  # best over budget?
        for records in runs.get(task.workload_key, []):
            best = None
            for i, (inp, res) in enumerate(records):
                over = over_budget(context, sampler.plans, sampler.ctx, as_records(inp.steps))
                if over is None:
                    continue
                shares[i < first_round].append(over)
                us = res.mean_cost * 1e6
                if res.ok and (best is None or us < best[0]):
                    best = (us, over)
            if best is not None:
                bests[best[1]].append(best[0])
        if not bests[True] and not bests[False]:
            continue

        def mean(xs):
            return f"{sum(xs) / len(xs):.2f}" if xs else "-"

        lines.append(
            f"| {name} | {len(bests[True]) + len(bests[False])} | "
            f"{mean(shares[True])} / {mean(shares[False])} | "
            f"{len(bests[True])}, {mean(bests[True])} | {len(bests[False])}, {mean(bests[False])} |"
        )
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> str:
    """Per workload: fresh depths by verdict and spill; the logs' fastest states' own depths the
    estimate rejects, and how many of those compile clean."""
    lines = [
        "| workload | fresh: rejected, spill / clean | fresh: admitted, spill / clean |"
        " fastest logged: own depth rejected (clean) / states |",
        "|---|---|---|---|",
    ]
    by_workload = collections.defaultdict(list)
    for r in rows:
        if r["error"] == "NO_ERROR":
            by_workload[r["workload"]].append(r)
    for name, rs in by_workload.items():
        count = collections.Counter()
        for r in rs:
            if r["origin"] == "fresh":
                verdict = "rejected" if r["estimate"] > r["budget"] else "admitted"
                count[verdict, r["spill_bytes"] > 0] += 1
        own = [r for r in rs if r["origin"] != "fresh" and r["depth"] == r["own_depth"]]
        rejected = [r for r in own if r["estimate"] > r["budget"]]
        clean = sum(r["spill_bytes"] == 0 for r in rejected)
        lines.append(
            f"| {name} | {count['rejected', True]} / {count['rejected', False]} | "
            f"{count['admitted', True]} / {count['admitted', False]} | "
            + (f"{len(rejected)} ({clean}) / {len(own)} |" if own else "- |")
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from spill_rate import spill_builder

    from autosched.task.workloads import SUITE

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["batch_matmul", "conv2d_7x7s2"])
    ap.add_argument("--count", type=int, default=40, help="fresh states per workload")
    ap.add_argument("--logs", nargs="*", default=[], help="record logs for the fastest states")
    ap.add_argument("--fast", type=int, default=20, help="fastest distinct logged states")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--runs",
        type=int,
        metavar="TRIALS",
        help="also read the logs of TRIALS records as searches: how often they measured a depth"
        " the estimate rejects, and how their bests compare by whether the best has one",
    )
    ap.add_argument("--out", help="write the summary table here (markdown)")
    ap.add_argument("--json", help="write every (state, depth) row here")
    ns = ap.parse_args(argv)
    unknown = [w for w in ns.workloads if w not in SUITE]
    if unknown:
        ap.error(f"unknown workloads {unknown}; the suite is {sorted(SUITE)}")
    logged = logged_times(ns.logs)
    rows: list[dict] = []
    with spill_builder(timeout=60) as builder:
        for name in ns.workloads:
            rows += rows_for(name, ns.count, logged, ns.fast, random.Random(ns.seed), builder)
        compiler = builder.compiler_used
    table = summary(rows)
    if ns.runs:
        table += "\n" + runs_table(ns.workloads, ns.logs, ns.runs)
    print(f"compiled with {compiler} for sm_90\n\n{table}")
    if ns.out:
        with open(ns.out, "w") as f:
            f.write(f"Compiled with {compiler} for sm_90.\n\n{table}")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
