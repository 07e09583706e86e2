"""The spawned process pools that lowering, features and code generation run in.

States do not pickle (te reducers hold lambdas), so work crosses to a worker as a workload key plus
step records and the worker rebuilds the DAG from the workload registry. One pool per worker count
is started on first use and kept for later calls (its start-up, about a second, is paid once)."""

from __future__ import annotations

import atexit
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from autosched.errors import AutoschedError

_POOLS: dict[int, ProcessPoolExecutor] = {}
_RESOLVABLE: dict[str, bool] = {}  # workload key -> can a fresh process rebuild its DAG?


def resolvable(key: str) -> bool:
    """Can a fresh process rebuild this workload from the registry?"""
    got = _RESOLVABLE.get(key)
    if got is None:
        from autosched.task.workload_registry import workload_tensors

        try:
            workload_tensors(key)
            got = True
        except (ImportError, AutoschedError):
            got = False
        _RESOLVABLE[key] = got
    return got


def get_pool(n_jobs: int) -> ProcessPoolExecutor:
    """The pool of `n_jobs` spawned workers (started on first use)."""
    pool = _POOLS.get(n_jobs)
    if pool is None:
        ctx = multiprocessing.get_context("spawn")
        pool = _POOLS[n_jobs] = ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx)
    return pool


@atexit.register
def shutdown_pools() -> None:
    """Stop every worker process (also run at exit)."""
    for pool in _POOLS.values():
        pool.shutdown(wait=False, cancel_futures=True)
    _POOLS.clear()
