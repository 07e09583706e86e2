"""The spawned process pools that lowering, features and code generation run in.

States do not pickle (te reducers hold lambdas), so work crosses to a worker as a serialised DAG
plus step records, and the worker rebuilds the DAG once per task. One pool per worker count
is started on first use and kept for later calls (its start-up, about a second, is paid once).

A spawned process normally imports the parent's main module again (as `__mp_main__`) before it
runs anything: a script that calls the search at its top level, without the
`if __name__ == "__main__":` guard, would run again in every worker and die there starting
workers of its own. These workers need nothing from the main module (the task travels as its
serialised DAG), so they are started without it: scripts work as users write them.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import types
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.context import SpawnContext, SpawnProcess

_POOLS: dict[tuple[int, int], ProcessPoolExecutor] = {}
# the workers' default niceness (`SearchParams.worker_niceness`): where the search shares the
# cores with the builder's compilers (the rounds of several tasks in flight at once), the
# compilers come first and the search takes the cores they leave idle (a batch's code
# generation runs in these workers too, beside the search)
COMPILERS_FIRST = 10
# the tuning loop searches in one thread while it measures (lowering in the pool) in another
_LOCK = threading.Lock()
_MAIN_SWAP = threading.Lock()


@contextmanager
def _main_module_hidden():
    """While a worker is started: a stand-in `__main__` without a file or a module spec, so
    that multiprocessing tells the child to leave its own `__main__` alone."""
    with _MAIN_SWAP:
        main = sys.modules["__main__"]
        stand_in = types.ModuleType("__main__")
        stand_in.__spec__ = None
        sys.modules["__main__"] = stand_in
        try:
            yield
        finally:
            sys.modules["__main__"] = main


class _WorkerProcess(SpawnProcess):
    """A spawned process that does not import the parent's main module."""

    @staticmethod
    def _Popen(process_obj):  # noqa: N802 (multiprocessing's name)
        with _main_module_hidden():
            return SpawnProcess._Popen(process_obj)


class _WorkerContext(SpawnContext):
    Process = _WorkerProcess


def get_pool(n_jobs: int, niceness: int = COMPILERS_FIRST) -> ProcessPoolExecutor:
    """The pool of `n_jobs` spawned workers running `niceness` above this process (started on
    first use)."""
    with _LOCK:
        pool = _POOLS.get((n_jobs, niceness))
        if pool is None:
            pool = ProcessPoolExecutor(
                max_workers=n_jobs,
                mp_context=_WorkerContext(),
                initializer=_lower_priority,
                initargs=(niceness,),
            )
            _POOLS[(n_jobs, niceness)] = pool
        return pool


def _lower_priority(niceness: int) -> None:
    """A worker's first act: step back `niceness` behind the compilers."""
    if not niceness:
        return
    try:
        os.nice(niceness)
    except (AttributeError, OSError):  # no niceness on this platform
        pass


@atexit.register
def shutdown_pools() -> None:
    """Stop every worker process (also run at exit)."""
    with _LOCK:
        for pool in _POOLS.values():
            pool.shutdown(wait=False, cancel_futures=True)
        _POOLS.clear()
