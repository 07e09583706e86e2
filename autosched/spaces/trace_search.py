"""Searching a user's stochastic schedule function `fn(sch)`: random search, and an evolutionary
search that mutates one sampler's decision at a time, ranked by the cost model.

TraceSearchPolicy is a `search.protocols.SearchPolicy`, driven by the tuning loop of
search.auto_schedule, so measuring, the record log (RecordToFile callbacks) and the best-kernel
build are the same as for the sketch search; `tune_space(task, fn)` wires it up. `WithTraces`
makes the records carry the trace of each state, and `PreloadMeasuredTraces` resumes a search
from such a log.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from autosched.errors import AutoschedError
from autosched.features import state_features
from autosched.search.cost_model import XGBModel, train_on_measured
from autosched.search.params import check_settings
from autosched.search.policy import LogCallback, as_records, logged_records
from autosched.search.protocols import MeasureCallback
from autosched.spaces.samplers import other_decision
from autosched.spaces.stochastic import Schedule, ScheduleFunction, replay
from autosched.spaces.trace import Trace

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State
    from autosched.task.search_task import SearchTask
    from costmodel import CostModel


@dataclass(frozen=True)
class TraceSearchParams:
    """`evolutionary=False` is plain random search. Each evolutionary round draws `population`
    fresh schedules, mutates the best for `generations` rounds keeping the model's top
    `population`, and hands out the top n (a share `eps_random` of them fresh at random)."""

    population: int = 32
    generations: int = 2
    eps_random: float = 0.2
    evolutionary: bool = True
    max_failures: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.population >= 1, "population must be >= 1"),
            (self.generations >= 0, "generations must be >= 0"),
            (0 <= self.eps_random <= 1, "eps_random must be in [0, 1]"),
            (self.max_failures >= 0, "max_failures must be >= 0"),
        ]
        check_settings("TraceSearchParams", checks)


class TraceSearchPolicy:
    """Searches the States that `fn` makes (a `protocols.SearchPolicy`); dedupes by State key,
    never hands one out twice. `init_search_callbacks(policy)` run once at the start (e.g.
    PreloadMeasuredTraces)."""

    def __init__(
        self,
        task: SearchTask,
        fn: ScheduleFunction,
        params: TraceSearchParams | None = None,
        model: CostModel | None = None,
        init_search_callbacks: Sequence[Callable[[TraceSearchPolicy], None]] = (),
    ) -> None:
        self.task = task
        self.fn = fn
        self.params = params or TraceSearchParams()
        self.rng = random.Random(self.params.seed)
        self.cost_model: CostModel = model if model is not None else XGBModel(nthread=1, seed=0)
        self.measured: dict[tuple, float] = {}
        self.schedules: dict[tuple, Schedule] = {}  # state key -> a schedule that makes it
        self.picked: set[tuple] = set()
        self._features: dict[tuple, np.ndarray | None] = {}
        self.failures = 0  # fn runs or replays that raised
        self.last_round: dict[str, float] = {}  # kept empty: a round here is not broken down
        for cb in init_search_callbacks:
            cb(self)

    # ---- making schedules --------------------------------------------------------------------
    def _keep(self, sch: Schedule) -> Schedule:
        """The schedule kept for `sch`'s State (the first that made it)."""
        return self.schedules.setdefault(sch.state.key(), sch)

    def sample(self, n: int) -> list[Schedule]:
        """Up to n schedules with distinct States, from fresh runs of `fn`."""
        out: dict[tuple, Schedule] = {}
        tries = 0
        while len(out) < n and tries < 4 * n + self.params.max_failures:
            tries += 1
            sch = Schedule(self.task.compute_dag, self.rng.getrandbits(32))
            try:
                self.fn(sch)
            except AutoschedError:
                self.failures += 1
                continue
            out.setdefault(sch.state.key(), self._keep(sch))
        return list(out.values())

    def mutate(self, sch: Schedule) -> Schedule | None:
        """`sch` with one sampler's decision drawn again (another tiling of the same extent,
        another candidate); None when it has no other choice or the new one does not replay."""
        samplers = sch.trace.sampler_indices
        if not samplers:
            return None
        i = self.rng.choice(samplers)
        inst = sch.trace.instructions[i]
        new = other_decision(self.rng, inst.kind, inst.decision, dict(inst.attrs), sch.contexts[i])
        if new is None:
            return None
        try:
            return self._keep(replay(sch.trace.with_decision(i, new), self.task.compute_dag))
        except AutoschedError:
            self.failures += 1
            return None

    # ---- ranking -----------------------------------------------------------------------------
    def features(self, key: tuple) -> np.ndarray | None:
        if key not in self._features:
            self._features[key] = state_features(self.schedules[key].state)
        return self._features[key]

    def rank(self, keys: list[tuple]) -> list[tuple]:
        """`keys` of lowerable states, best predicted first."""
        valid = [k for k in keys if self.features(k) is not None]
        if not valid:
            return []
        scores = self.cost_model.predict([self.features(k) for k in valid])
        order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
        return [valid[i] for i in order]

    def evolve(self, n: int) -> list[tuple]:
        """Keys of the model's best new states after `generations` rounds of mutation."""
        p = self.params
        seeds = [self.schedules[k] for k in self.best_measured(p.population)]
        pool = {s.state.key() for s in seeds + self.sample(p.population)}
        for _ in range(p.generations):
            parents = [self.schedules[k] for k in self.rank(list(pool))[: p.population]]
            for parent in parents:
                child = self.mutate(parent)
                if child is not None:
                    pool.add(child.state.key())
        return [k for k in self.rank(list(pool)) if k not in self.picked][:n]

    # ---- the policy interface ----------------------------------------------------------------
    def search_one_round(self, n: int) -> list[State]:
        """n new States to measure (fewer when the space runs dry)."""
        n_random = n if not self.params.evolutionary or not self.measured else 0
        n_random = max(n_random, round(n * self.params.eps_random))
        keys = [s.state.key() for s in self.sample(2 * n_random)]
        keys = [k for k in dict.fromkeys(keys) if k not in self.picked][:n_random]
        if len(keys) < n:
            keys += [k for k in self.evolve(n) if k not in keys][: n - len(keys)]
        self.picked.update(keys)
        return [self.schedules[k].state for k in keys]

    def add_measured(self, state: State, cost: float) -> None:
        """Record a measured State's mean cost (inf for a failure)."""
        self.measured[state.key()] = cost
        self.picked.add(state.key())

    def add_measured_records(self, records, cost: float, trace: dict | None = None) -> bool:
        """Mark a logged state (its step records) measured, never handed out again. With the
        trace that made it (a record's `trace`), its schedule is kept too, so that it can seed
        the evolution; True when it was (the trace replays to the same state)."""
        key = as_records(records)
        self.measured[key] = cost
        self.picked.add(key)
        if trace is None or key in self.schedules:
            return key in self.schedules
        try:
            sch = replay(Trace.from_json(trace), self.task.compute_dag)
        except (AutoschedError, KeyError, TypeError, ValueError):
            return False
        if sch.state.key() != key:
            return False
        self.schedules[key] = sch
        return True

    def trace_json(self, records) -> dict | None:
        """The trace (JSON data) of the schedule that made a state, by its step records."""
        sch = self.schedules.get(as_records(records))
        return None if sch is None else sch.trace.to_json()

    def best_measured(self, k: int) -> list[tuple]:
        ok = sorted((c, key) for key, c in self.measured.items() if math.isfinite(c))
        return [key for _, key in ok[:k] if key in self.schedules]

    def best_state(self) -> tuple[float, State] | None:
        """(cost, State) of the fastest measured state, or None."""
        best = self.best_measured(1)
        return (self.measured[best[0]], self.schedules[best[0]].state) if best else None

    def update_model(self, states: Sequence[State], costs: Sequence[float]) -> None:
        """Train the cost model on a measured batch (lowerable states only)."""
        features = [self.features(s.key()) for s in states]
        kept = [(f, c) for f, c in zip(features, costs, strict=True) if f is not None]
        train_on_measured(self.cost_model, self.task, [f for f, _ in kept], [c for _, c in kept])

    def schedule_of(self, state: State) -> Schedule | None:
        """The schedule (and so the trace) that made a handed-out state."""
        return self.schedules.get(state.key())


class WithTraces:
    """Measure-callback wrapper: hands `callback` the inputs with the trace of the schedule
    that made each state (`MeasureInput.trace`), so that the log shows and resumes the trace."""

    def __init__(self, policy: TraceSearchPolicy, callback: MeasureCallback) -> None:
        self.policy = policy
        self.callback = callback

    def __call__(self, inputs, results) -> None:
        inputs = [replace(inp, trace=self.policy.trace_json(inp.steps)) for inp in inputs]
        self.callback(inputs, results)


class PreloadMeasuredTraces(LogCallback):
    """Init-search callback (resuming a trace search): a log's states of this task are never
    measured again; those whose record carries a trace that replays seed the evolution (the
    best first) and train the cost model. A torn last line is closed as for the sketch search."""

    def __call__(self, policy: TraceSearchPolicy) -> None:
        seeded, costs = [], []
        for inp, res in logged_records(self.path, policy.task.workload_key):
            if policy.add_measured_records(inp.steps, res.mean_cost, inp.trace):
                seeded.append(policy.schedules[as_records(inp.steps)].state)
                costs.append(res.mean_cost)
        ok = [(s, c) for s, c in zip(seeded, costs, strict=True) if math.isfinite(c)]
        if ok:
            policy.update_model([s for s, _ in ok], [c for _, c in ok])
