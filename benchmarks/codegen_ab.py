"""A/B of code-generation variants on the GPU: the same states built and timed several ways.

    python3 benchmarks/codegen_ab.py --logs LOG [LOG ...] --top 8 \
        --random conv2d_bias_relu=64 matmul=64 --json out.json

States: the `top` fastest correct distinct records of every log (records format, .gz allowed) and
`N` states sampled by the sketch rules for each `--random NAME=N`. Every state is lowered once
per variant of `VARIANTS` (a name and a context manager that changes code generation while the
state is built), all variants are built and timed in one measure context (correctness checked),
twice, interleaved; per state and variant the faster time, the error, ptxas registers / spills and
the compile seconds (one build of each) are printed as JSON. The summary per variant: geometric
mean of its time over the first variant's (states where every variant ran), how often it is
more than 2% faster or slower, its errors, and its total compile seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def _patched(obj, name: str, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


def _unmerged_digits():
    """Index digits left as lowered: (f // 72)*72 + ... + f % 3 is not recombined into f."""
    from autosched.lower import arith

    return _patched(arith, "_merge_digits", lambda aff, bounds, dtype: aff)


def _serial_pragma(pragma: str):
    from autosched.codegen.cuda import CUDATarget

    return _patched(CUDATarget, "loop_pragma", {**CUDATarget.loop_pragma, "serial": pragma})


VARIANTS = {
    "unmerged": _unmerged_digits,
    "current": contextlib.nullcontext,
    "serial_unroll_1": lambda: _serial_pragma("#pragma unroll 1"),
}


def best_states(path: str, top: int):
    """(workload_key, steps) of the `top` fastest correct distinct records of `path`."""
    from autosched.records import load_records

    rows = sorted(
        ((r.mean_cost, i.workload_key, i.steps) for i, r in load_records(path) if r.ok),
        key=lambda row: row[0],
    )
    seen, out = set(), []
    for _, key, steps in rows:
        if (key, repr(steps)) not in seen and len(out) < top:
            seen.add((key, repr(steps)))
            out.append((key, steps))
    return out


def random_states(name: str, count: int, seed: int):
    """(workload_key, steps) of `count` states of suite workload `name` sampled with `seed`."""
    from autosched.compat import generate_sketches
    from autosched.sketch import SketchSampler
    from autosched.task.search_task import suite_task

    task = suite_task(name)
    states = SketchSampler(generate_sketches(task)).sample(count, seed)
    return [(task.workload_key, [s.to_record() for s in st.steps]) for st in states]


def main(argv: list[str] | None = None) -> int:
    import autosched
    from autosched.codegen.build import build
    from autosched.search.program_measurer import task_reference
    from measure import LocalBuilder, LocalMeasureContext, LocalRunner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", nargs="*", default=[])
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--random", nargs="*", default=[], metavar="NAME=N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--json", default=None)
    ns = ap.parse_args(argv)
    states = [("top", key, steps) for path in ns.logs for key, steps in best_states(path, ns.top)]
    for spec in ns.random:
        name, count = spec.split("=")
        states += [
            ("random", key, steps) for key, steps in random_states(name, int(count), ns.seed)
        ]
    jobs, references = [], {}  # (group, key, artifacts of the variants)
    for group, key, steps in states:
        task = autosched.SearchTask(workload_key=key)
        artifacts = []
        for name in ns.variants:
            with VARIANTS[name]():
                artifacts.append(
                    build(task.compute_dag, task.compute_dag.replay_steps(steps)).artifact(key)
                )
        if key not in references:
            references[key] = task_reference(task, artifacts[0].args)
        jobs.append((group, key, artifacts))
    rows, per_batch = [], max(1, 64 // (2 * len(ns.variants)))
    with LocalMeasureContext(LocalBuilder(), LocalRunner()) as ctx:
        for start in range(0, len(jobs), per_batch):
            chunk = jobs[start : start + per_batch]
            batch = [a for _, _, artifacts in chunk for a in artifacts * 2]
            got = ctx.measure_batch(batch, references)
            for j, (group, key, artifacts) in enumerate(chunk):
                mine = got[j * 2 * len(artifacts) : (j + 1) * 2 * len(artifacts)]
                row = {"group": group, "workload": json.loads(key)[0], "workload_key": key}
                for k, name in enumerate(ns.variants):
                    runs = mine[k :: len(artifacts)]
                    ok = [r.mean_cost for r in runs if r.error_kind.name == "NO_ERROR"]
                    row[name] = {
                        "us": min(ok) * 1e6 if ok else None,
                        "error": runs[0].error_kind.name,
                        "compile_s": round(runs[0].build_seconds, 3),
                        "regs": [[r.registers, r.spill_bytes] for r in runs[0].resources.values()],
                        "same_as_first": artifacts[k].source == artifacts[0].source,
                    }
                rows.append(row)
                print(json.dumps(row), flush=True)
    summary = summarize(rows, ns.variants)
    print(json.dumps(summary, indent=1))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"variants": ns.variants, "rows": rows, "summary": summary}, f, indent=1)
    return 0


def summarize(rows: list[dict], variants: list[str]) -> dict:
    """Per group (top or random, workload) and variant: time ratio to the first variant
    (geometric mean), wins, errors, compile seconds."""
    out = {}
    for group in sorted({(r["group"], r["workload"]) for r in rows}):
        mine = [r for r in rows if (r["group"], r["workload"]) == group]
        both = [r for r in mine if all(r[v]["us"] for v in variants)]
        group = "/".join(group)
        out[group] = {"states": len(mine), "all_ran": len(both)}
        for v in variants:
            ratios = [r[v]["us"] / r[variants[0]]["us"] for r in both]
            out[group][v] = {
                "time_ratio_geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4)
                if ratios
                else None,
                "faster": sum(x < 0.98 for x in ratios),
                "slower": sum(x > 1.02 for x in ratios),
                "errors": sum(r[v]["error"] != "NO_ERROR" for r in mine),
                "compile_s": round(sum(r[v]["compile_s"] for r in mine), 1),
                "best_us": min((r[v]["us"] for r in mine if r[v]["us"]), default=None),
            }
    return out


if __name__ == "__main__":
    raise SystemExit(main())
