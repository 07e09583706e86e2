"""How much faster is a log's best one decision away? (GPU)

    python3 benchmarks/results/2026-11-26_8810daf_h200x2/neighbourhood.py OUT.jsonl \
        $(cat benchmarks/results/2026-11-26_8810daf_h200x2/logs.txt)    # from the repository root

For each record log: its fastest correct state and those of its one-decision neighbours that
pass the search's validity checks (`Workers.evaluate`), built and timed by the search's own
measurer (`ProgramMeasurer`: NVRTC builds in worker processes, the runner's GPU time with
inputs rotated past L2, outputs checked against the reference), all in one batch so that the
best is re-timed beside its neighbours. Neighbours: every other unroll depth; every other
vector length of each cooperative fetch; double buffering toggled (all shared caches of the
attach loop on, or all off); each shared cache's row padding removed, or a 16- or 4-byte
padding added; every move of a factor between two levels of each reduction split; up to
SPATIAL_MOVES random moves between levels of the spatial splits. One JSON line per state: the
log, the move, the time (or the error).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))

UNROLL = (0, 16, 64, 512, 1024)
VECTORS = (1, 2, 4)
PADS = ((8, 4), (2, 1))  # storage_align (factor, offset) in floats: 16- and 4-byte rows
SPATIAL_MOVES = 30


def moves(levels: list[int], innermost_limit: int) -> list[list[int]]:
    """Every way to move one divisor > 1 of one level to another level."""
    out = []
    last = len(levels) - 1
    for src in range(len(levels)):
        for dst in range(len(levels)):
            if src == dst:
                continue
            for f in range(2, levels[src] + 1):
                if levels[src] % f:
                    continue
                new = list(levels)
                new[src] //= f
                new[dst] *= f
                if dst == last and new[dst] > innermost_limit:
                    continue
                out.append(new)
    return out


def sketch_length(records: tuple, sketches) -> int | None:
    from autosched.search.mutations import structure_key

    for sk in sketches:
        n = len(sk.steps)
        mine = structure_key(records[:n])
        theirs = structure_key(tuple(s.to_record() for s in sk.steps))
        if mine == theirs:
            return n
    return None


def neighbours(dag, records: tuple, sketches, rng: random.Random) -> list[tuple[str, tuple]]:
    from autosched.search.mutations import TileSizeMutation, as_step, is_unroll_pragma

    out: list[tuple[str, tuple]] = []

    def put(kind, k, record):
        out.append((kind, records[:k] + (record,) + records[k + 1 :]))

    state = dag.replay_steps(records)
    spatial_moves = []
    for k, r in enumerate(records):
        if is_unroll_pragma(r):
            now = int(r[3].split("$")[1])
            for v in UNROLL:
                if v != now:
                    put(f"unroll {now}->{v}", k, r[:3] + (f"auto_unroll_max_step${v}",))
        elif r[0] == "SP" and len(r[4]) == 1 and k + 1 < len(records):
            nxt = records[k + 1]
            if nxt[0] == "AN" and nxt[1] == r[1] and nxt[3] == "vectorize":
                for v in VECTORS:
                    if v != r[4][0]:
                        put(f"vector {r[4][0]}->{v}", k, r[:4] + ((v,),) + r[5:])
        elif r[0] == "SP" and len(r[4]) >= 2:
            levels = TileSizeMutation.levels(as_step(r))
            if levels is None:
                continue
            kind = "reduce" if len(r[4]) == 2 else "spatial"
            for new in moves(levels, 64):
                moved = r[:4] + (tuple(new[1:]),) + r[5:]
                item = (f"{kind} {r[1]}:{r[2]} {levels}->{new}", k, moved)
                if kind == "reduce":
                    put(*item)
                else:
                    spatial_moves.append(item)
    rng.shuffle(spatial_moves)
    for item in spatial_moves[:SPATIAL_MOVES]:
        put(*item)
    # double buffering: all off, or all shared caches on (before the unroll pragmas)
    dbs = [k for k, r in enumerate(records) if r[0] == "DB"]
    if dbs:
        out.append(("double buffer off", tuple(r for r in records if r[0] != "DB")))
    else:
        caches = [
            i for i, st in enumerate(state.stages) if st.scope == "shared" and st.attach is not None
        ]
        at = next((k for k, r in enumerate(records) if is_unroll_pragma(r)), len(records))
        added = tuple(("DB", i) for i in caches)
        if added:
            out.append(("double buffer on", records[:at] + added + records[at:]))
    # row padding: remove one, or add one after the sketch's steps
    sas = {r[1]: k for k, r in enumerate(records) if r[0] == "SA"}
    for stage, k in sas.items():
        out.append((f"padding off {stage}", records[:k] + records[k + 1 :]))
    n = sketch_length(records, sketches)
    if n is not None:
        for i, st in enumerate(state.stages):
            if st.scope != "shared" or st.attach is None or i in sas:
                continue
            axes = [a.name for a in st.op.axis]
            names = [it.name for it in sketches_stage(sketches, records, n, i)]
            if len(axes) < 2 or axes[-2] not in names:
                continue
            for factor, offset in PADS:
                sa = ("SA", i, names.index(axes[-2]), factor, offset)
                after = n + len(sas)
                out.append((f"padding {offset} on {i}", records[:after] + (sa,) + records[after:]))
    return out


def sketches_stage(sketches, records, n, i):
    from autosched.search.mutations import structure_key

    for sk in sketches:
        if len(sk.steps) == n and structure_key(records[:n]) == structure_key(
            tuple(s.to_record() for s in sk.steps)
        ):
            return sk.stages[i].iters
    return []


def main(out_path: str, logs: list[str]) -> None:
    from autosched.records import load_best
    from autosched.search.policy import SearchParams, SketchPolicy, as_records
    from autosched.search.program_measurer import ProgramMeasurer
    from autosched.task.search_task import SUITE, suite_task

    by_key = {suite_task(name).workload_key: name for name in SUITE}
    bests = [(log, *load_best(log)) for log in logs]
    rng = random.Random(0)
    with open(out_path, "w") as out:
        for name in dict.fromkeys(by_key[inp.workload_key] for _, inp, _ in bests):
            task = suite_task(name)
            dag = task.compute_dag
            policy = SketchPolicy(task, params=SearchParams(seed=0, n_jobs=None), verbose=0)
            measurer = ProgramMeasurer(task, workers=policy.workers)
            for log, inp, res in bests:
                if by_key[inp.workload_key] != name:
                    continue
                t0 = time.time()
                best = as_records(inp.steps)
                cands = [("best", best)] + neighbours(dag, best, policy.sketches, rng)
                outcomes = policy.workers.evaluate([r for _, r in cands])
                pairs = zip(cands, outcomes, strict=True)
                kept = [(k, r) for (k, r), o in pairs if not isinstance(o, str)]
                kept = kept if kept and kept[0][0] == "best" else [cands[0]] + kept
                states = [dag.replay_steps(r) for _, r in kept]
                results = measurer.measure(states)
                ok = []
                for (kind, _), r in zip(kept, results, strict=True):
                    row = {"log": log, "workload": name, "kind": kind}
                    row["record_us"] = res.mean_cost * 1e6
                    if r.ok:
                        row["us"] = r.mean_cost * 1e6
                        ok.append((row["us"], kind))
                    else:
                        row["error"] = f"{r.error_kind}: {r.error_msg}"[:160]
                    out.write(json.dumps(row) + "\n")
                out.flush()
                base = next((t for t, k in ok if k == "best"), math.nan)
                top = min(ok) if ok else (math.nan, "")
                print(
                    f"{log}: {len(states)} of {len(cands)} valid, best {base:.2f} us (log "
                    f"{res.mean_cost * 1e6:.2f}), fastest neighbour {top[0]:.2f} ({top[1]}), "
                    f"{time.time() - t0:.0f} s",
                    flush=True,
                )
            measurer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
