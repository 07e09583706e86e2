"""Features of many States, optionally in a pool of spawned processes.

States hold te objects (reducers with lambdas) and do not pickle, so a worker gets the
workload key and the step records of each state, rebuilds the DAG from the workload registry
once per key, replays the steps, lowers and extracts. The pool is started on first use and kept
for later calls (its start-up, about a second, is paid once per process)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from autosched.errors import AutoschedError
from autosched.features.extract import state_features
from autosched.search.process_pool import forget_pool, get_pool, resolvable

_WORKER_DAGS: dict = {}  # in a worker: workload key -> ComputeDAG


def features_for_states(states: Sequence, n_jobs: int = 1) -> list[np.ndarray | None]:
    """One feature matrix per state (statements x features), None for a state that fails to
    lower. With n_jobs > 1 the work is spread over n_jobs spawned processes; states whose DAG
    is not a registered workload are done here, with a warning."""
    states = list(states)
    if n_jobs <= 1 or len(states) < 2:
        return [state_features(s) for s in states]
    out: list[np.ndarray | None] = [None] * len(states)
    by_key: dict[str, list[int]] = {}
    local: list[int] = []
    for i, s in enumerate(states):
        key = getattr(s.dag, "workload_key", None)
        if key is not None and resolvable(key):
            by_key.setdefault(key, []).append(i)
        else:
            local.append(i)
    if local:
        warnings.warn(
            f"features_for_states: {len(local)} state(s) belong to a DAG that is not a registered "
            "workload, so they are computed in this process (register the workload to spread them)",
            stacklevel=2,
        )
    pool = get_pool(n_jobs)
    futures = []
    for key, idx in by_key.items():
        size = max(1, -(-len(idx) // (n_jobs * 4)))
        for k in range(0, len(idx), size):
            part = idx[k : k + size]
            records = [tuple(st.to_record() for st in states[i].steps) for i in part]
            futures.append((part, pool.submit(_work, key, records)))
    for i in local:
        out[i] = state_features(states[i])
    try:
        for part, fut in futures:
            for i, f in zip(part, fut.result()):
                out[i] = f
    except BrokenProcessPool:
        forget_pool(n_jobs)  # a worker died; the next call starts a fresh pool
        raise
    return out


def _work(key: str, records: list[tuple]) -> list[np.ndarray | None]:
    """In a worker: rebuild each state from its steps and extract its features."""
    from autosched.schedule.compute_dag import ComputeDAG

    dag = _WORKER_DAGS.get(key)
    if dag is None:
        dag = _WORKER_DAGS[key] = ComputeDAG.from_workload_key(key)
    out: list[np.ndarray | None] = []
    for steps in records:
        try:
            state = dag.replay_steps(steps)
        except AutoschedError:
            out.append(None)
            continue
        out.append(state_features(state))
    return out
