"""`TaskScheduler`: share one tuning budget among the tasks of a model (Ansor, section 6).

A model is a list of tasks, each with a weight (how many times the network runs it). The
objective is the estimated end-to-end latency, by default the sum of weight x latency, where a
task without a kernel yet counts at its *fallback cost* (PyTorch's time for its subgraph, which
is what runs in its place), so the estimate is finite from the start.

The budget is a trial count, a wall-clock time, or both (`task_budget.Budget`). First a warm-up
round for every task, most expected time (weight x fallback cost, else FLOPs) first, its size
scaled to the budget so that every task gets measured trials (`task_budget.warm_up_size`). Then
each round gives `num_measures_per_round` trials to the task whose tuning is expected to lower
the objective the most: the largest estimated gradient of the objective with respect to that
task's trials, with an epsilon-greedy share of random picks.

The scheduler knows tasks only through *tuners* (`tune_model.PolicyTuner`): an object per task
with `tune(n) -> (trials measured, best cost so far)`, `best_cost`, `curve` (the best cost
after each trial already in the log when resuming) and `best()`. Real tuners run the tuning loop
with the task's own SketchPolicy; tests plug in simulated latency curves.

With `parallel` > 1, up to that many rounds of different tasks are in flight at once, each in a
thread; as soon as one ends, the next task is picked and started. So while one task's batch is
measured on a GPU the next task's batch is searched on the CPU, and with several GPUs several
tasks' batches are measured at once.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autosched.errors import AutoschedError
from autosched.search.concurrent_rounds import Finished, RoundsInFlight
from autosched.search.protocols import TaskTuner
from autosched.search.task_budget import Budget, WarmUpParams, warm_up_size
from autosched.search.task_similarity import similarity_groups

if TYPE_CHECKING:
    from autosched.task.search_task import SearchTask

STRATEGIES = ("gradient", "round-robin")
# stands in for the cost of a task with neither a correct kernel nor a fallback cost, so the
# gradient stays finite (and large: such a task makes the model unusable, so it comes first)
NO_KERNEL_COST = 1e10


def weighted_sum(weights: Sequence[float]) -> Callable[[Sequence[float]], float]:
    """The default objective: sum over tasks of weight x best latency (seconds)."""
    ws = list(weights)
    return lambda costs: sum(w * c for w, c in zip(ws, costs, strict=True))


@dataclass(frozen=True)
class SchedulerParams:
    """The knobs of the gradient strategy (Ansor's defaults) and of the warm-up round."""

    eps_greedy: float = 0.05  # share of rounds that tune a random live task
    backward_window: int = 3  # rounds over which the recent improvement is measured
    alpha: float = 0.2  # weight of the backward (observed) against the forward (guessed) slope
    beta: float = 2.0  # how far off the best similar task's throughput a task may stay
    # a task whose best has not improved in this many trials is not tuned again (None: never)
    early_stopping_per_task: int | None = None
    seed: int = 0
    warm_up: WarmUpParams = WarmUpParams()


@dataclass
class SchedulerResult:
    """Where tuning stands: per task its best cost (seconds, inf when none), the trials it
    received and its best (cost, State) (None when none), plus one dict per round. `latency` is
    the objective with each task that has no kernel at its fallback cost (`fallback_costs`,
    inf where none was given); `tuning_s` and `measured` are the wall-clock seconds and trials
    of the last `tune` call."""

    best_costs: list[float]
    trials: list[int]
    best_states: list
    history: list[dict] = field(default_factory=list)
    latency: float = math.inf  # the objective: estimated end-to-end seconds
    interrupted: bool = False
    fallback_costs: list[float] = field(default_factory=list)
    tuning_s: float = 0.0
    measured: int = 0

    @property
    def total_trials(self) -> int:
        return sum(self.trials)

    @property
    def fallback_tasks(self) -> list[int]:
        """Tasks with no correct kernel: in the model they run in PyTorch."""
        return [i for i, c in enumerate(self.best_costs) if not math.isfinite(c)]

    @property
    def trials_per_s(self) -> float:
        """Trials measured per wall-clock second in the last `tune` call."""
        return self.measured / self.tuning_s if self.tuning_s > 0 else 0.0

    def summary(self, names: Sequence[str] | None = None) -> str:
        """Lines for the end of a run: tasks tuned, trials and their rate, the estimated
        latency, and which tasks run in PyTorch (by `names`, default their indices)."""
        n = len(self.best_costs)
        fallback = self.fallback_tasks
        label = list(names) if names is not None else [str(i) for i in range(n)]
        lines = [
            f"tuned {n - len(fallback)} of {n} tasks with {self.total_trials} trials"
            f" ({self.measured} in {self.tuning_s:.0f} s, {self.trials_per_s:.1f} trials/s)"
        ]
        if math.isfinite(self.latency):
            lines.append(f"estimated end-to-end latency: {self.latency * 1e6:.1f} us")
        else:
            lines.append("estimated end-to-end latency: unknown (a task has no kernel and no time)")
        if fallback:
            shown = ", ".join(f"{i} {label[i]}" for i in fallback)
            lines.append(
                f"{len(fallback)} task(s) without a kernel run in PyTorch, counted at that time: "
                + shown
            )
        return "\n".join(lines)


class TaskScheduler:
    """Allocates trials among tasks. `tuners[i]` tunes `tasks[i]`; `objective(costs)` defaults
    to the weighted sum; `fallback_costs[i]` is what task i costs while it has no kernel (its
    time in PyTorch; default inf). `tune(total_trials, time_budget_s)` may be called again with a
    larger budget to go on; Ctrl-C during a round ends `tune` with the result so far. `clock`
    reads wall-clock seconds for the time budget (tests inject one).

    `parallel` > 1 keeps up to that many rounds of different tasks in flight (one thread each;
    they measure on different GPUs, or one searches while another measures); their tuners must
    then share nothing that is not thread-safe (`tune_tasks` sees to it)."""

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
        fallback_costs: Sequence[float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if parallel < 1:
            raise AutoschedError(f"parallel must be at least 1, got {parallel}")
        if strategy not in STRATEGIES:
            raise AutoschedError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
        if not tasks:
            raise AutoschedError("the task scheduler needs at least one task")
        n = len(tasks)
        weights = [1.0] * n if task_weights is None else [float(w) for w in task_weights]
        fallback = [math.inf] * n if fallback_costs is None else [float(c) for c in fallback_costs]
        if len(weights) != n or len(tuners) != n or len(fallback) != n:
            raise AutoschedError(
                "tasks, task weights, tuners and fallback costs must have the same length"
            )
        if any(c <= 0 or math.isnan(c) for c in fallback):
            raise AutoschedError(f"fallback costs must be positive seconds, got {fallback}")
        self.tasks = list(tasks)
        self.weights = weights
        self.tuners = list(tuners)
        self.fallback_costs = fallback
        self.objective = objective or weighted_sum(weights)
        self.strategy = strategy
        self.per_round = num_measures_per_round
        self.params = params or SchedulerParams()
        self.verbose = verbose
        self.parallel = parallel
        self.clock = clock
        self.rng = random.Random(self.params.seed)
        self.flops = [t.compute_dag.flop_count for t in self.tasks]
        self.groups = similarity_groups(self.tasks)  # task index -> indices of similar tasks
        self.best_costs = [math.inf] * n
        self.trials = [0] * n
        self.rounds = [0] * n  # rounds each task received (the t of Ansor's gradient)
        self.round_bests: list[list[float]] = [[] for _ in range(n)]  # best after each round
        self.best_at_trial = [0] * n  # the task's trial count when its best was found
        self.dead: set[int] = set()
        self.history: list[dict] = []
        self.next_rr = 0  # round-robin position
        self.measured_now = 0  # trials measured in the current `tune` call
        self.started = clock()  # when it started (`clock` seconds)
        self.tuning_s = 0.0  # its wall-clock seconds
        self.warm_up_size: int | None = None  # the size of its warm-up rounds, once known
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

    def costs(self) -> list[float]:
        """Per task what the model spends on it now: its best kernel's cost, else its fallback
        cost (inf when it has neither)."""
        return [
            b if math.isfinite(b) else f
            for b, f in zip(self.best_costs, self.fallback_costs, strict=True)
        ]

    def latency(self) -> float:
        """The objective at the current costs (inf while a task has neither a correct kernel
        nor a fallback cost)."""
        return self.objective(self.costs())

    def result(self, interrupted: bool = False) -> SchedulerResult:
        """The result so far: bests, trials, best states per task and the round history."""
        return SchedulerResult(
            list(self.best_costs),
            list(self.trials),
            [t.best() for t in self.tuners],
            list(self.history),
            self.latency(),
            interrupted,
            list(self.fallback_costs),
            self.tuning_s,
            self.measured_now,
        )

    # ---- the loop ----------------------------------------------------------------------------
    def tune(
        self, total_trials: int | None = None, time_budget_s: float | None = None
    ) -> SchedulerResult:
        """Tune until `total_trials` trials were measured over all tasks (those of a resumed log
        included), `time_budget_s` seconds passed (no round starts after it; rounds in flight
        end), every task stopped, or Ctrl-C; returns the result so far. Give either or both."""
        budget = Budget(total_trials, time_budget_s, self.clock)
        self.measured_now = 0
        self.warm_up_size = None
        self.started = budget.start
        flight = RoundsInFlight(self.parallel)
        try:
            while True:
                while flight.has_room() and self._start_round(budget, flight):
                    pass
                if not flight.rounds:
                    break
                self._account_finished(flight.wait_first())
                self.tuning_s = budget.elapsed()
        except BaseException as exc:  # Ctrl-C, or a round that failed: the others end first
            interrupted = isinstance(exc, KeyboardInterrupt)
            self._account_finished(flight.finish(self.verbose if interrupted else 0), ok_only=True)
            self.tuning_s = budget.elapsed()
            if not interrupted:
                raise
            # a round cut short may have found better states than the scheduler saw
            for i, tuner in enumerate(self.tuners):
                self.best_costs[i] = min(self.best_costs[i], getattr(tuner, "best_cost", math.inf))
            if self.verbose:
                print("interrupted: returning the best found so far", flush=True)
            return self.result(interrupted=True)
        self.tuning_s = budget.elapsed()
        return self.result()

    def _account_finished(self, finished: list[Finished], ok_only: bool = False) -> None:
        """Account the rounds that ended well; then raise what the first failed one raised
        (unless `ok_only`)."""
        error: BaseException | None = None
        for i, _, started, outcome in finished:
            if isinstance(outcome, BaseException):
                error = error or outcome
            else:
                self.account(i, *outcome, self.clock() - started)
        if error is not None and not ok_only:
            raise error

    def _start_round(self, budget: Budget, flight: RoundsInFlight) -> bool:
        """Pick a task and start its round (run it here when rounds are not parallel);
        False when the budget or the live tasks are spent."""
        used = sum(self.trials) + flight.trials()
        if len(self.dead) == len(self.tasks) or not budget.can_start_round(used):
            return False
        i = self.pick(exclude=flight.tasks())
        if i is None:
            return False
        n = self.round_size(i, budget, used, flight.tasks())
        if self.parallel == 1:
            self.tune_task(i, n)
        else:
            flight.submit(i, n, self.clock(), self.tuners[i].tune)
        return True

    def round_size(self, i: int, budget: Budget, used: int, running: Sequence[int] = ()) -> int:
        """Trials of task i's next round: its warm-up size (scaled to the budget left and the
        tasks still waiting for theirs) when it has had none, else `num_measures_per_round`;
        never more than the trial budget allows."""
        hard = budget.trials_left(used)
        if self.rounds[i] > 0:
            return int(min(self.per_round, hard))
        cold = sum(
            1
            for j in range(len(self.tasks))
            if self.rounds[j] == 0 and j not in self.dead and (j == i or j not in running)
        )
        expected = min(hard, budget.expected_trials_left(used, self.measured_now))
        size = warm_up_size(expected, cold, self.per_round, self.params.warm_up)
        # the warm-up rounds of one call are of one size: the first known one, smaller when
        # the budget turns out to be smaller (a time budget's rate), never larger
        if self.warm_up_size is not None:
            size = min(size, self.warm_up_size)
        elif math.isfinite(expected):
            self.warm_up_size = size
        return int(max(1, min(size, hard)))

    def tune_task(self, i: int, n: int) -> None:
        """One round: `n` trials of task i, then its bookkeeping and a progress line."""
        t0 = self.clock()
        measured, best = self.tuners[i].tune(n)
        self.account(i, measured, best, self.clock() - t0)

    def account(self, i: int, measured: int, best: float, seconds: float) -> None:
        """A round of task i is done: its bookkeeping and a progress line."""
        if measured == 0:  # its search space is exhausted
            self.dead.add(i)
        if best < self.best_costs[i]:
            self.best_at_trial[i] = self.trials[i] + measured
        self.best_costs[i] = min(best, self.best_costs[i])
        self.trials[i] += measured
        self.measured_now += measured
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
            "elapsed_s": self.clock() - self.started,
            "untuned": sum(1 for c in self.best_costs if not math.isfinite(c)),
        }
        self.history.append(rec)
        if self.verbose:
            self._print(rec)

    def _print(self, rec: dict) -> None:
        i = rec["task"]
        name = getattr(self.tasks[i], "desc", None) or str(self.tasks[i])
        untuned = f" ({rec['untuned']} in PyTorch)" if rec["untuned"] else ""
        print(
            f"[task round {rec['round']:4d}] trials {rec['total_trials']:6d}  "
            f"task {i:3d} ({self.trials[i]:5d} trials) best {rec['task_best_us']:10.2f} us"
            f"  | est. end-to-end {rec['latency_us']:11.2f} us{untuned}  {rec['seconds']:6.1f}s"
            f"  {name}",
            flush=True,
        )

    # ---- which task next ---------------------------------------------------------------------
    def pick(self, exclude: Sequence[int] = ()) -> int | None:
        """The next task: a live task not tuned yet (warm-up, most expected time first), then
        by strategy; tasks in `exclude` (already running) are passed over. None when no task is
        left."""
        live = [i for i in range(len(self.tasks)) if i not in self.dead and i not in exclude]
        if not live:
            return None
        cold = [i for i in live if self.rounds[i] == 0]
        if cold:
            return min(cold, key=lambda i: (-self.warm_up_priority(i), i))
        if self.strategy == "round-robin":
            return self._round_robin(live)
        if self.rng.random() < self.params.eps_greedy:
            return self.rng.choice(live)
        grads = {i: self.gradient(i) for i in live}
        steepest = min(grads.values())
        return self.rng.choice([i for i in live if grads[i] == steepest])

    def warm_up_priority(self, i: int) -> float:
        """What orders the warm-up: the time task i is expected to take in the model, weight x
        fallback cost when every task has one, else weight x FLOPs."""
        if all(math.isfinite(c) for c in self.fallback_costs):
            return self.weights[i] * self.fallback_costs[i]
        return self.weights[i] * self.flops[i]

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
        costs = [c if math.isfinite(c) else NO_KERNEL_COST for c in self.costs()]
        c, t = costs[i], self.rounds[i]
        chain = self._chain_gradient(costs, i)
        stand_in = (
            self.fallback_costs[i] if math.isfinite(self.fallback_costs[i]) else NO_KERNEL_COST
        )
        hist = [b if math.isfinite(b) else stand_in for b in self.round_bests[i]]
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
