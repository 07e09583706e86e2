"""A/B on the GPU: the best recorded kernels with cooperative-fetch loops unrolled a few copies at
a time (autosched.unrolling.FETCH_UNROLL) against fully unrolled.

    python3 benchmarks/unroll_ab.py LOG [LOG ...] --top 8 --json out.json

Takes the `top` fastest correct distinct states of every log (records format, .gz allowed),
lowers each twice (FETCH_UNROLL as set, then 0 = full unroll), builds and times both variants
in one measure context (correctness checked), interleaved, and prints per kernel: µs and ptxas
registers / spill bytes of each variant, then the geometric-mean ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def best_states(path: str, top: int):
    """(workload_key, steps, logged seconds) of the `top` fastest correct distinct records."""
    from autosched.records import load_records

    rows = sorted(((r.mean_cost, i.workload_key, i.steps) for i, r in load_records(path) if r.ok),
                  key=lambda row: row[0])
    seen, out = set(), []
    for cost, key, steps in rows:
        if (key, repr(steps)) not in seen and len(out) < top:
            seen.add((key, repr(steps)))
            out.append((key, steps, cost))
    return out


def variant(task, steps, fetch_unroll: int):
    """The artifact of `steps` lowered with `FETCH_UNROLL = fetch_unroll`."""
    from autosched import unrolling
    from autosched.build_module import build

    saved, unrolling.FETCH_UNROLL = unrolling.FETCH_UNROLL, fetch_unroll
    try:
        return build(task.compute_dag, task.compute_dag.replay_steps(steps)).artifact(task.workload_key)
    finally:
        unrolling.FETCH_UNROLL = saved


def main(argv: list[str] | None = None) -> int:
    import autosched
    from autosched import unrolling
    from autosched.program_measurer import task_reference
    from measure import LocalBuilder, LocalMeasureContext, LocalRunner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json", default=None)
    ns = ap.parse_args(argv)
    capped = unrolling.FETCH_UNROLL
    rows = []
    with LocalMeasureContext(LocalBuilder(), LocalRunner(repeat=5)) as ctx:
        for path in ns.logs:
            for key, steps, logged in best_states(path, ns.top):
                task = autosched.SearchTask(workload_key=key)
                a, b = variant(task, steps, capped), variant(task, steps, 0)
                ref = task_reference(task, a.args)
                got = ctx.measure_batch([a, b, a, b], {key: ref})
                row = {"workload_key": key, "logged_us": logged * 1e6, "same_source": a.source == b.source}
                for name, results in (("capped", got[0::2]), ("full", got[1::2])):
                    ok = [r for r in results if r.error_kind.name == "NO_ERROR"]
                    row[f"{name}_us"] = min(r.mean_cost for r in ok) * 1e6 if ok else None
                    row[f"{name}_error"] = results[0].error_kind.name
                    row[f"{name}_regs"] = [[k.registers, k.spill_bytes] for k in results[0].resources.values()]
                rows.append(row)
                print(json.dumps(row), flush=True)
    pairs = [(r["capped_us"], r["full_us"]) for r in rows
             if r["capped_us"] and r["full_us"] and not r["same_source"]]
    if pairs:
        geo = math.exp(sum(math.log(c / f) for c, f in pairs) / len(pairs))
        print(f"{len(pairs)} kernels differ: capped/full time, geometric mean {geo:.3f} "
              f"(FETCH_UNROLL={capped}); capped faster in {sum(c < f for c, f in pairs)}")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"fetch_unroll": capped, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
