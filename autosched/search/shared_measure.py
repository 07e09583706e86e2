"""What the tasks of a model share when they are tuned at once: one measure context, and
thread-safe handles on the cost model and the record log.

`tune_model.tune_tasks` tunes several tasks at once when there are several GPUs (or a
cluster's workers): each task keeps its own policy and measurer, but all measure through one
context (one builder, one runner per GPU), learn in one cost model and append to one log. The
context is thread-safe; the model and the log writer are wrapped in `Locked`, which runs one
call at a time.
"""

from __future__ import annotations

import threading
from typing import TypeVar, cast

T = TypeVar("T")


class Locked:
    """A proxy running every method call of `target` (and calls of `target` itself) under one
    lock; attributes that are not callable are read through."""

    def __init__(self, target, lock: threading.RLock | None = None) -> None:
        self._target = target
        self._lock = lock or threading.RLock()

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        if not callable(value):
            return value
        lock = self._lock

        def call(*args, **kwargs):
            with lock:
                return value(*args, **kwargs)

        return call

    def __call__(self, *args, **kwargs):
        with self._lock:
            return self._target(*args, **kwargs)


def locked(target: T) -> T:
    """`target` behind a `Locked` proxy, typed as the target (the proxy has all its methods)."""
    return cast(T, Locked(target))
