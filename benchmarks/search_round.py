"""The CPU a search round costs, without a GPU: rounds of `SketchPolicy` on a suite workload in
this process (`n_jobs=1`), each batch given a stand-in cost so the model trains as in a search.

    python -m benchmarks.search_round conv2d_bias_relu --rounds 3 [--small] [--seed 0]
    python -m benchmarks.search_round matmul_fp16 --rounds 3    # a Tensor Core suite workload

One JSON line per round: its CPU seconds, the policy's account of it (`last_round`: sampling,
evaluation and prediction seconds, candidates sampled, lowered, found invalid and taken from the
feature cache) and a digest of the batch it chose. Two versions of the search that choose the
same batches for a seed make the same search; their CPU seconds per round compare what a round
costs. The stand-in cost is a crude roofline of the lowered program (more threads and less
shared memory are faster): what it ranks does not matter, only that it is deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections.abc import Iterator

from autosched.lower import ir
from autosched.lower.lowering import lower
from autosched.search.params import SearchParams
from autosched.search.policy import SketchPolicy
from autosched.task.search_task import SearchTask
from autosched.task.workload_registry import WORKLOADS
from autosched.task.workloads import SUITE, TENSOR_CORE_SUITE

# the suite workloads a round can be run on: the fp32 suite and the Tensor Core one
WORKLOAD_SUITES = {**SUITE, **TENSOR_CORE_SUITE}


def stand_in_cost(program: ir.Program) -> float:
    """Seconds from a crude roofline of `program`: more threads in all and per block, fewer
    shared bytes, faster."""
    cost = 0.0
    for k in program.kernels:
        threads = math.prod(k.grid) * k.threads_per_block
        cost += 1e-6 * (1 + 4096 / max(1, threads)) * (1 + 64 / max(1, k.threads_per_block))
        cost += 1e-9 * k.shared_bytes
    return cost


def rounds(
    workload: str,
    n_rounds: int,
    per_round: int = 64,
    shape: tuple | None = None,
    seed: int = 0,
    **params,
) -> Iterator[dict]:
    """Each round's account: `cpu` seconds, the policy's `last_round` and the `batch` digest,
    for the suite workload (`WORKLOAD_SUITES`) at `shape` (default: its full size). `params`:
    SearchParams fields besides n_jobs (1) and seed."""
    name, full, _ = WORKLOAD_SUITES[workload]
    task = SearchTask(WORKLOADS[name], shape or full)
    policy = SketchPolicy(task, params=SearchParams(n_jobs=1, seed=seed, **params), verbose=0)
    for k in range(n_rounds):
        start = time.process_time()
        states = policy.search_one_round(per_round)
        cpu = time.process_time() - start
        digest = hashlib.sha1(repr([s.key() for s in states]).encode()).hexdigest()[:12]
        account = {key: round(v, 3) for key, v in policy.last_round.items()}
        yield {"round": k, "cpu": round(cpu, 3), **account, "batch": digest}
        # the batch "measured" (after the round's account is out: a caller that stops at a
        # round trains no model for the next)
        costs = []
        for state in states:
            try:
                costs.append(stand_in_cost(lower(state)))
            except Exception:  # a state that does not lower counts as a failed measurement
                costs.append(math.inf)
            policy.add_measured(state, costs[-1])
        policy.update_model(states, costs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOAD_SUITES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=64, help="batch size (64)")
    parser.add_argument("--small", action="store_true", help="the suite's reduced shape")
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    shape = WORKLOAD_SUITES[ns.workload][2] if ns.small else None
    for account in rounds(ns.workload, ns.rounds, ns.per_round, shape, ns.seed):
        print(json.dumps(account), flush=True)


if __name__ == "__main__":
    main()
