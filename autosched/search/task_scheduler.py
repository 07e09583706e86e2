"""`TaskScheduler`: share one trial budget among the tasks of a model (Ansor, section 6).

A model is a list of tasks, each with a weight (how many times the network runs it). The
objective is the estimated end-to-end latency, by default the sum of weight x best latency. After
one warm-up round over every task, each round gives `num_measures_per_round` trials to the task
whose tuning is expected to lower the objective the most: the largest estimated gradient of the
objective with respect to that task's trials, with an epsilon-greedy share of random picks.

The scheduler knows tasks only through *tuners* (`tune_model.PolicyTuner`): an object per task
with `tune(n) -> (trials measured, best cost so far)`, `best_cost`, `curve` (the best cost
after each trial already in the log when resuming) and `best()`. Real tuners run the tuning loop
with the task's own SketchPolicy; tests plug in simulated latency curves.
"""

from __future__ import annotations

import concurrent.futures
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autosched.errors import AutoschedError
from autosched.search.protocols import TaskTuner
from autosched.search.task_similarity import similarity_groups

if TYPE_CHECKING:
    from autosched.task.search_task import SearchTask

STRATEGIES = ("gradient", "round-robin")
# stands in for the cost of a task with no correct kernel yet, so the gradient stays finite
# (and large: such a task makes the model unusable, so it comes first)
NO_KERNEL_COST = 1e10


def weighted_sum(weights: Sequence[float]) -> Callable[[Sequence[float]], float]:
    """The default objective: sum over tasks of weight x best latency (seconds)."""
    ws = list(weights)
    return lambda costs: sum(w * c for w, c in zip(ws, costs, strict=True))


@dataclass(frozen=True)
class SchedulerParams:
    """The knobs of the gradient strategy (Ansor's defaults)."""

    eps_greedy: float = 0.05  # share of rounds that tune a random live task
    backward_window: int = 3  # rounds over which the recent improvement is measured
    alpha: float = 0.2  # weight of the backward (observed) against the forward (guessed) slope
    beta: float = 2.0  # how far off the best similar task's throughput a task may stay
    # a task whose best has not improved in this many trials is not tuned again (None: never)
    early_stopping_per_task: int | None = None
    seed: int = 0


@dataclass
class SchedulerResult:
    """Where tuning stands: per task its best cost (seconds, inf when none), the trials it
    received and its best (cost, State) (None when none), plus one dict per round."""

    best_costs: list[float]
    trials: list[int]
    best_states: list
    history: list[dict] = field(default_factory=list)
    latency: float = math.inf  # the objective: estimated end-to-end seconds
    interrupted: bool = False

    @property
    def total_trials(self) -> int:
        return sum(self.trials)


class TaskScheduler:
    """Allocates trials among tasks. `tuners[i]` tunes `tasks[i]`; `objective(best_costs)`
    defaults to the weighted sum. `tune(total_trials)` may be called again with a larger total
    to go on; Ctrl-C during a round ends `tune` with the result so far.

    `parallel` > 1 tunes that many different tasks at once (one thread each; their rounds
    measure on different GPUs, or on a cluster), picked one after another by the strategy;
    their tuners must then share nothing that is not thread-safe (`tune_tasks` sees to it)."""

    def __init__(
        self,
        tasks: Sequence[SearchTask],
        task_weights: Sequence[float] | None,
        tuners: Sequence[TaskTuner],
        objective: Callable[[Sequence[float]], float] | None = None,
        strategy: str = "gradient",
        num_measures_per_round: int = 64,
        params: SchedulerParams | None = None,
        verbose: int = 1,
        parallel: int = 1,
    ) -> None:
        if parallel < 1:
            raise AutoschedError(f"parallel must be at least 1, got {parallel}")
        if strategy not in STRATEGIES:
            raise AutoschedError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
        if not tasks:
            raise AutoschedError("the task scheduler needs at least one task")
        weights = [1.0] * len(tasks) if task_weights is None else [float(w) for w in task_weights]
        if len(weights) != len(tasks) or len(tuners) != len(tasks):
            raise AutoschedError("tasks, task weights and tuners must have the same length")
        self.tasks = list(tasks)
        self.weights = weights
        self.tuners = list(tuners)
        self.objective = objective or weighted_sum(weights)
        self.strategy = strategy
        self.per_round = num_measures_per_round
        self.params = params or SchedulerParams()
        self.verbose = verbose
        self.parallel = parallel
        self.rng = random.Random(self.params.seed)
        self.flops = [t.compute_dag.flop_count for t in self.tasks]
        self.groups = similarity_groups(self.tasks)  # task index -> indices of similar tasks
        n = len(tasks)
        self.best_costs = [math.inf] * n
        self.trials = [0] * n
        self.rounds = [0] * n  # rounds each task received (the t of Ansor's gradient)
        self.round_bests: list[list[float]] = [[] for _ in range(n)]  # best after each round
        self.best_at_trial = [0] * n  # the task's trial count when its best was found
        self.dead: set[int] = set()
        self.history: list[dict] = []
        self.next_rr = 0  # round-robin position
        for i, tuner in enumerate(self.tuners):
            self._preload(i, list(tuner.curve))

    # ---- state -------------------------------------------------------------------------------
    def _preload(self, i: int, curve: list[float]) -> None:
        """Start task i from the best-so-far curve of its logged trials (resuming), cut into
        rounds of `num_measures_per_round` as if this scheduler had tuned it."""
        if not curve:
            return
        self.trials[i] = len(curve)
        self.best_costs[i] = curve[-1]
        self.round_bests[i] = [curve[k - 1] for k in self._round_ends(curve)]
        self.rounds[i] = len(self.round_bests[i])
        self.best_at_trial[i] = curve.index(curve[-1]) + 1

    def _round_ends(self, curve: list[float]) -> list[int]:
        return list(range(self.per_round, len(curve), self.per_round)) + [len(curve)]

    def latency(self) -> float:
        """The objective at the current bests (inf while a task has no correct kernel)."""
        return self.objective(self.best_costs)

    def result(self, interrupted: bool = False) -> SchedulerResult:
        """The result so far: bests, trials, best states per task and the round history."""
        return SchedulerResult(
            list(self.best_costs),
            list(self.trials),
            [t.best() for t in self.tuners],
            list(self.history),
            self.latency(),
            interrupted,
        )

    # ---- the loop ----------------------------------------------------------------------------
    def tune(self, total_trials: int) -> SchedulerResult:
        """Tune until `total_trials` trials were measured over all tasks (those of a resumed log
        included), every task stopped, or Ctrl-C; returns the result so far."""
        try:
            while sum(self.trials) < total_trials and len(self.dead) < len(self.tasks):
                if self.parallel == 1:
                    i = self.pick()
                    assert i is not None  # a live task is left
                    self.tune_task(i, min(self.per_round, total_trials - sum(self.trials)))
                else:
                    self.tune_tasks_at_once(self.next_rounds(total_trials - sum(self.trials)))
        except KeyboardInterrupt:
            # a round cut short may have found better states than the scheduler saw
            for i, tuner in enumerate(self.tuners):
                self.best_costs[i] = min(self.best_costs[i], getattr(tuner, "best_cost", math.inf))
            if self.verbose:
                print("interrupted: returning the best found so far", flush=True)
            return self.result(interrupted=True)
        return self.result()

    def next_rounds(self, budget: int) -> list[tuple[int, int]]:
        """Up to `parallel` (task, trials) rounds to run at once: distinct tasks, each picked by
        the strategy among those not picked yet, within `budget` trials."""
        rounds: list[tuple[int, int]] = []
        while len(rounds) < self.parallel and budget > 0:
            i = self.pick(exclude=[t for t, _ in rounds])
            if i is None:
                break
            n = min(self.per_round, budget)
            rounds.append((i, n))
            budget -= n
        return rounds

    def tune_tasks_at_once(self, rounds: list[tuple[int, int]]) -> None:
        """Run the rounds in threads at once, then account for them in the order picked."""
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(rounds)) as pool:
            futures = [pool.submit(self.tuners[i].tune, n) for i, n in rounds]
            outcomes = [f.result() for f in futures]
        seconds = time.perf_counter() - t0
        for (i, _), (measured, best) in zip(rounds, outcomes, strict=True):
            self.account(i, measured, best, seconds)

    def tune_task(self, i: int, n: int) -> None:
        """One round: `n` trials of task i, then its bookkeeping and a progress line."""
        t0 = time.perf_counter()
        measured, best = self.tuners[i].tune(n)
        self.account(i, measured, best, time.perf_counter() - t0)

    def account(self, i: int, measured: int, best: float, seconds: float) -> None:
        """A round of task i is done: its bookkeeping and a progress line."""
        if measured == 0:  # its search space is exhausted
            self.dead.add(i)
        if best < self.best_costs[i]:
            self.best_at_trial[i] = self.trials[i] + measured
        self.best_costs[i] = min(best, self.best_costs[i])
        self.trials[i] += measured
        self.rounds[i] += 1
        self.round_bests[i].append(self.best_costs[i])
        stop = self.params.early_stopping_per_task
        if stop is not None and self.trials[i] - self.best_at_trial[i] >= stop:
            self.dead.add(i)
        rec = {
            "round": len(self.history) + 1,
            "task": i,
            "trials": measured,
            "total_trials": sum(self.trials),
            "task_best_us": self.best_costs[i] * 1e6,
            "latency_us": self.latency() * 1e6,
            "seconds": seconds,
        }
        self.history.append(rec)
        if self.verbose:
            self._print(rec)

    def _print(self, rec: dict) -> None:
        i = rec["task"]
        name = getattr(self.tasks[i], "desc", None) or str(self.tasks[i])
        print(
            f"[task round {rec['round']:4d}] trials {rec['total_trials']:6d}  "
            f"task {i:3d} ({self.trials[i]:5d} trials) best {rec['task_best_us']:10.2f} us"
            f"  | est. end-to-end {rec['latency_us']:11.2f} us  {rec['seconds']:6.1f}s  {name}",
            flush=True,
        )

    # ---- which task next ---------------------------------------------------------------------
    def pick(self, exclude: Sequence[int] = ()) -> int | None:
        """The next task: any live task not tuned yet (warm-up, in order), then by strategy;
        tasks in `exclude` (already running) are passed over. None when no task is left."""
        live = [i for i in range(len(self.tasks)) if i not in self.dead and i not in exclude]
        if not live:
            return None
        for i in live:
            if self.rounds[i] == 0:
                return i
        if self.strategy == "round-robin":
            return self._round_robin(live)
        if self.rng.random() < self.params.eps_greedy:
            return self.rng.choice(live)
        grads = {i: self.gradient(i) for i in live}
        steepest = min(grads.values())
        return self.rng.choice([i for i in live if grads[i] == steepest])

    def _round_robin(self, live: list[int]) -> int:
        n = len(self.tasks)
        for k in range(n):
            i = (self.next_rr + k) % n
            if i in live:
                self.next_rr = i + 1
                return i
        raise AutoschedError("no live task to tune")  # tune() never asks then

    def gradient(self, i: int) -> float:
        """d(objective)/d(rounds of task i), estimated (negative: more rounds, lower latency).
        The chain rule over task i's best cost times a blend of its observed slope over the
        last `backward_window` rounds and a guessed one: the smaller of what a 1/t curve
        promises and how far it is from `beta` x the best throughput of similar tasks."""
        p = self.params
        costs = [c if math.isfinite(c) else NO_KERNEL_COST for c in self.best_costs]
        c, t = costs[i], self.rounds[i]
        chain = self._chain_gradient(costs, i)
        hist = [b if math.isfinite(b) else NO_KERNEL_COST for b in self.round_bests[i]]
        backward = 0.0
        if len(hist) > p.backward_window:
            backward = (hist[-1] - hist[-1 - p.backward_window]) / p.backward_window
        forward_guess = c - c / t
        similar = [j for j in self.groups[i] if math.isfinite(self.best_costs[j])]
        if len(similar) > 1:
            best_rate = max(self.flops[j] / self.best_costs[j] for j in similar)
            forward_guess = min(forward_guess, p.beta * self.flops[i] / best_rate)
        forward = forward_guess - c
        return chain * (p.alpha * backward + (1 - p.alpha) * forward)

    def _chain_gradient(self, costs: list[float], i: int) -> float:
        """d(objective)/d(best cost of task i), by a forward difference (exact for sums)."""
        delta = max(costs[i] * 1e-3, 1e-15)
        bumped = list(costs)
        bumped[i] += delta
        return (self.objective(bumped) - self.objective(costs)) / delta
