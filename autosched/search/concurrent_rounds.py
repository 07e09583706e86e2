"""The rounds of different tasks the task scheduler runs at once, each in a thread.

Each round is `tuner.tune(n)`: the task's search (CPU, its workers) and then the measurement of
its batch (GPU). With several rounds in flight, one task's batch is searched while another's is
measured, and with several GPUs several batches are measured at once; the scheduler picks the
next task as soon as any round ends, so no round waits for a slower one.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

Outcome = tuple[int, float]  # (trials measured, best cost so far) of a round
# (task, trials asked, start time, outcome or what the round raised)
Finished = tuple[int, int, float, Outcome | BaseException]


class RoundsInFlight:
    """Up to `capacity` rounds running in threads (none with a capacity of 1: the scheduler
    then runs its rounds itself). `wait_first` returns the rounds that ended, in the order they
    were started."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(capacity, thread_name_prefix="task-round")
            if capacity > 1
            else None
        )
        # future -> (task, trials asked, start time, sequence number)
        self.rounds: dict[concurrent.futures.Future, tuple[int, int, float, int]] = {}
        self._submitted = 0

    def has_room(self) -> bool:
        return len(self.rounds) < self.capacity

    def tasks(self) -> list[int]:
        """The tasks whose rounds are running."""
        return [i for i, *_ in self.rounds.values()]

    def trials(self) -> int:
        """The trials asked of the running rounds."""
        return sum(n for _, n, *_ in self.rounds.values())

    def submit(self, task: int, n: int, started: float, tune: Callable[[int], Outcome]) -> None:
        """Start `tune(n)` for `task` in a thread."""
        assert self._pool is not None, "a capacity of 1 runs no thread"
        future = self._pool.submit(tune, n)
        self.rounds[future] = (task, n, started, self._submitted)
        self._submitted += 1

    def wait_first(self) -> list[Finished]:
        """Wait until a round ends; every ended round, removed, in the order started, with its
        outcome or the exception it raised."""
        done: set[concurrent.futures.Future] = set()
        while not done:  # in short waits, so that Ctrl-C reaches the caller
            done, _ = concurrent.futures.wait(
                self.rounds, timeout=0.2, return_when=concurrent.futures.FIRST_COMPLETED
            )
        return self._collect(done)

    def _collect(self, done: set[concurrent.futures.Future]) -> list[Finished]:
        finished: list[Finished] = []
        for future in sorted(done, key=lambda f: self.rounds[f][3]):
            task, n, started, _ = self.rounds.pop(future)
            error = future.exception()
            finished.append((task, n, started, future.result() if error is None else error))
        return finished

    def finish(self, verbose: int) -> list[Finished]:
        """After Ctrl-C or a failed round: wait for the running rounds (their records are
        written as each batch ends) and return them; a second Ctrl-C gives up on them."""
        if not self.rounds:
            return []
        if verbose:
            print(
                f"stopping: waiting for {len(self.rounds)} round(s) in flight (Ctrl-C again to "
                "stop now)",
                flush=True,
            )
        try:
            concurrent.futures.wait(self.rounds)
        except KeyboardInterrupt:
            pass
        return self._collect({f for f in self.rounds if f.done()})

    def close(self) -> None:
        """Stop taking rounds; a thread still running (given up on) is not waited for."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
