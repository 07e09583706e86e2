"""The spawned process pools that lowering, features and code generation run in.

States do not pickle (te reducers hold lambdas), so work crosses to a worker as a serialised DAG
plus step records, and the worker rebuilds the DAG once per task. One pool per worker count
is started on first use and kept for later calls (its start-up, about a second, is paid once)."""

from __future__ import annotations

import atexit
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor

_POOLS: dict[int, ProcessPoolExecutor] = {}
# the tuning loop searches in one thread while it measures (lowering in the pool) in another
_LOCK = threading.Lock()


def get_pool(n_jobs: int) -> ProcessPoolExecutor:
    """The pool of `n_jobs` spawned workers (started on first use)."""
    with _LOCK:
        pool = _POOLS.get(n_jobs)
        if pool is None:
            ctx = multiprocessing.get_context("spawn")
            pool = _POOLS[n_jobs] = ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx)
        return pool


@atexit.register
def shutdown_pools() -> None:
    """Stop every worker process (also run at exit)."""
    with _LOCK:
        for pool in _POOLS.values():
            pool.shutdown(wait=False, cancel_futures=True)
        _POOLS.clear()
