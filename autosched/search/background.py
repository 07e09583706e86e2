"""One call run in a background thread, its result or exception waited for later: how the
tuning loop measures a batch while it searches the next one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """Runs `fn()` in a daemon thread from `start()`; `result()` waits for it and returns its
    value or raises its exception. A daemon, so that a measurement that hangs never keeps the
    interpreter from exiting once the user gave up on it (a second Ctrl-C). Made and started in
    two steps, so that a caller can start it where it handles Ctrl-C: an interrupt that comes
    while the thread starts still finds the object to wait for."""

    def __init__(self, fn: Callable[[], T], name: str = "background") -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start `fn()` in the thread."""
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to the waiting thread, which re-raises it
            self._error = exc

    def done(self) -> bool:
        """True once `fn` returned or raised, or when it was never started."""
        return not self._thread.is_alive()

    def wait(self, seconds: float) -> None:
        """Wait up to `seconds` for `fn` to end."""
        if self._thread.is_alive():
            self._thread.join(seconds)

    def result(self) -> T:
        """`fn()`'s value (waiting for it), or its exception raised here."""
        while self._thread.is_alive():
            self._thread.join(0.1)  # in short waits, so that Ctrl-C reaches the caller
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def first_done(tasks: Sequence[Background[T]], poll: float = 0.02) -> Background[T]:
    """The first of the started `tasks` to end (the earliest listed, when several have), waited
    for in short joins, so that Ctrl-C reaches the caller."""
    if not tasks:
        raise ValueError("first_done needs at least one task")
    while True:
        for task in tasks:
            if task.done():
                return task
        tasks[0].wait(poll)
