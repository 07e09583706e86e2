"""Do compile timeouts show in a state's lowered code? (CPU, from the logs)

    python3 benchmarks/results/2026-11-26_6fe3285_local/compile_cost.py LOG [LOG ...]

For every correct or COMPILE_TIMEOUT record of one task's logs: the estimated compiled
statements of its largest kernel (`compiled_statements`), and the same count with each
statement weighted by its expression nodes, or by its integer divisions and remainders. Prints
how well each separates the timeouts from the correct states (AUC) and, at the value that
rejects 70% of the timeouts, how many correct states and how many within 10% of the fastest it
would reject too.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

DIVISIONS = ("/", "%", "//", "floordiv", "floormod")


def expr_cost(e, memo: dict) -> tuple[int, int]:
    """(nodes, integer divisions and remainders) of an expression tree, shared subtrees
    counted each time they appear (the printer prints them each time)."""
    from autosched.te.expr import BinOp
    from autosched.te.visitor import children

    if id(e) not in memo:
        nodes, divisions = 1, int(type(e) is BinOp and e.op in DIVISIONS)
        for child in children(e):
            n, d = expr_cost(child, memo)
            nodes, divisions = nodes + n, divisions + d
        memo[id(e)] = (nodes, divisions)
    return memo[id(e)]


def code_cost(s, memo: dict, which: int) -> int:
    """Weighted statements once the loops nvcc unrolls are unrolled (as `compiled_statements`
    counts them), each statement weighted by `expr_cost(...)[which]` plus one."""
    from autosched.lower import ir
    from autosched.lower.unrolling import COMPILER_UNROLL_STATEMENTS, compiled_statements

    if isinstance(s, ir.Seq):
        return sum(code_cost(c, memo, which) for c in s.stmts)
    if isinstance(s, ir.For):
        body = code_cost(s.body, memo, which)
        small = s.extent * compiled_statements(s.body) <= COMPILER_UNROLL_STATEMENTS
        return s.extent * body if s.kind in ("unroll", "vectorize") or small else body
    if isinstance(s, ir.IfThenElse):
        other = 0 if s.else_case is None else code_cost(s.else_case, memo, which)
        return expr_cost(s.cond, memo)[which] + code_cost(s.then_case, memo, which) + other
    if isinstance(s, ir.Store):
        return 1 + expr_cost(s.index, memo)[which] + expr_cost(s.value, memo)[which]
    return 1


def rows(paths: list[str]) -> list[tuple]:
    """(error name, statements, expression nodes, divisions, µs or None) per record."""
    from autosched.lower.lowering import lower
    from autosched.lower.unrolling import compiled_statements
    from autosched.schedule.compute_dag import ComputeDAG

    dag, out = None, []
    for path in paths:
        for record in map(json.loads, gzip.open(path, "rt")):
            error = record["result"].get("error_name")
            if error not in ("NO_ERROR", "COMPILE_TIMEOUT"):
                continue
            if dag is None:
                dag = ComputeDAG.from_workload_key(record["task"]["workload_key"])
            try:
                kernels = lower(dag.replay_steps(record["steps"])).kernels
            except Exception:  # a record of an older schedule space
                continue
            memo: dict = {}
            statements = max(compiled_statements(k.body) for k in kernels)
            nodes = max(code_cost(k.body, memo, 0) for k in kernels)
            divisions = max(code_cost(k.body, memo, 1) for k in kernels)
            us = min(record["result"]["costs"]) * 1e6 if error == "NO_ERROR" else None
            out.append((error, statements, nodes, divisions, us))
    return out


def auc(positives: list[float], negatives: list[float]) -> float:
    """The chance that a positive scores above a negative (ties count half)."""
    negatives = sorted(negatives)
    total = 0.0
    for x in positives:
        below = bisect.bisect_left(negatives, x)
        total += below + 0.5 * (bisect.bisect_right(negatives, x) - below)
    return total / (len(positives) * len(negatives))


def main(paths: list[str]) -> None:
    found = rows(paths)
    timeouts = [r for r in found if r[0] == "COMPILE_TIMEOUT"]
    correct = [r for r in found if r[0] == "NO_ERROR"]
    fastest = min(r[4] for r in correct)
    near = [r for r in correct if r[4] <= 1.1 * fastest]
    print(f"{len(timeouts)} timeouts, {len(correct)} correct, {len(near)} within 10% of fastest")
    for i, name in ((1, "statements"), (2, "expression nodes"), (3, "divisions")):
        limit = sorted(r[i] for r in timeouts)[int(0.3 * len(timeouts))]
        lost = sum(r[i] >= limit for r in correct)
        lost_near = sum(r[i] >= limit for r in near)
        print(
            f"{name}: AUC {auc([r[i] for r in timeouts], [r[i] for r in correct]):.3f}; "
            f"at >= {limit} (70% of the timeouts): {lost} correct, {lost_near} near the fastest"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
