"""The rounds of different tasks the task scheduler runs at once, each in a background thread.

Each round is `tuner.tune(n)`: the task's search (CPU, its workers) and then the measurement of
its batch (GPU). With several rounds in flight, one task's batch is searched while another's is
measured, and with several GPUs several batches are measured at once; the scheduler picks the
next task as soon as any round ends, so no round waits for a slower one. The threads are
`background.Background`'s, the tuning loop's own: daemons, so that a round that hangs never
keeps the interpreter from exiting once the user gave up on it (a second Ctrl-C).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from autosched.search.background import Background

Outcome = tuple[int, float]  # (trials measured, best cost so far) of a round
# (task, trials asked, start time, outcome or what the round raised)
Finished = tuple[int, int, float, Outcome | BaseException]


@dataclass
class _Round:
    task: int
    trials: int
    started: float
    thread: Background[Outcome]


class RoundsInFlight:
    """Up to `capacity` rounds running in background threads (a capacity of 1 starts none: the
    scheduler then runs its rounds itself). `wait_first` returns the rounds that ended, in the
    order they were started."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rounds: list[_Round] = []  # in the order started
        self._ended = threading.Event()  # set by each round as it ends

    def has_room(self) -> bool:
        return len(self.rounds) < self.capacity

    def tasks(self) -> list[int]:
        """The tasks whose rounds are running."""
        return [r.task for r in self.rounds]

    def trials(self) -> int:
        """The trials asked of the running rounds."""
        return sum(r.trials for r in self.rounds)

    def submit(self, task: int, n: int, started: float, tune: Callable[[int], Outcome]) -> None:
        """Start `tune(n)` for `task` in a background thread."""
        assert self.capacity > 1, "a capacity of 1 runs no thread"

        def run() -> Outcome:
            try:
                return tune(n)
            finally:
                self._ended.set()

        thread = Background(run, f"task-{task}-round")
        self.rounds.append(_Round(task, n, started, thread))
        thread.start()

    def wait_first(self) -> list[Finished]:
        """Wait until a round ends; every ended round, removed, in the order started, with its
        outcome or the exception it raised."""
        while True:
            ended = [r for r in self.rounds if r.thread.done()]
            if ended:
                return self._collect(ended)
            self._ended.wait(0.2)  # in short waits, so that Ctrl-C reaches the caller
            self._ended.clear()  # a round ending now is seen by the next look

    def _collect(self, ended: list[_Round]) -> list[Finished]:
        finished: list[Finished] = []
        for r in ended:
            self.rounds.remove(r)
            try:
                outcome: Outcome | BaseException = r.thread.result()
            except BaseException as exc:  # the scheduler decides what it stops
                outcome = exc
            finished.append((r.task, r.trials, r.started, outcome))
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
            while not all(r.thread.done() for r in self.rounds):
                self._ended.wait(0.2)
                self._ended.clear()
        except KeyboardInterrupt:
            pass
        return self._collect([r for r in self.rounds if r.thread.done()])
