"""Tuners over a template task's config space (AutoTVM's shape): a tuner proposes config
indices in batches, `tune` instantiates their States, measures them with any measurer (by
default the sketch search's ProgramMeasurer), and hands (MeasureInput, MeasureRecordResult)
pairs to the callbacks, e.g. `RecordToFile` — the inputs carry the config and the DAG, and a
config that cannot be instantiated is a trial with an instantiation error.

A tuner is also a `search.protocols.SearchPolicy`, so the tuning loop of the other searches
(`search.auto_schedule.run_trials`) can drive it; there a config that cannot be instantiated is
skipped, and the records are the measurer's (without the config).

Here: random, grid (index order) and genetic; the model-guided one is in model_tuner.py.
`load_history(log)` resumes any of them from a log: its configs are never proposed again.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autosched.errors import AutoschedError
from autosched.records import MeasureInput, MeasureRecordResult, load_records, now
from autosched.search.protocols import MeasureCallback, Measurer
from measure import MeasureErrorKind

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State
    from autosched.spaces.template import TemplateTask


def _default_measurer(task: TemplateTask) -> Measurer:
    from autosched.search.program_measurer import ProgramMeasurer

    return ProgramMeasurer(task)  # type: ignore[arg-type]  # a template task has what it reads


class Tuner:
    """Subclasses give `next_batch(n)`; `update(indices, costs)` lets them learn."""

    def __init__(self, task: TemplateTask, seed: int = 0) -> None:
        self.task = task
        self.space = task.config_space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()
        self.best_index: int | None = None
        self.best_cost = float("inf")
        self.best_result: MeasureRecordResult | None = None
        self.trials = 0
        self.last_round: dict[str, float] = {}  # kept empty: a round here is not broken down
        self._index_of: dict[tuple, int] = {}  # a handed-out State's key -> its config index

    # ---- what a tuner decides ----

    def next_batch(self, n: int) -> list[int]:
        """Up to n config indices not measured yet."""
        raise NotImplementedError

    def update(self, indices: Sequence[int], costs: Sequence[float]) -> None:
        """Learn from a measured batch: the configs' mean costs in seconds, inf for a failure
        (nothing, by default)."""

    def load_history(self, log: str) -> int:
        """Resume from a record log: its configs of this task count as visited (never proposed
        again), the best of them is the best so far, and the tuner learns from them (`update`,
        so that XGBTuner trains its model on them). Returns how many configs it read."""
        indices, results = [], []
        for inp, res in load_records(log):
            if inp.workload_key != self.task.workload_key or inp.config is None:
                continue
            try:
                index = self.task.config(inp.config).index
            except (AutoschedError, KeyError, ValueError):
                continue  # a config of another space (the template changed)
            if index in self.visited:
                continue
            self.visited.add(index)
            indices.append(index)
            results.append(res)
            self._offer(index, res.mean_cost, res)
        if indices:
            self.update(indices, [r.mean_cost for r in results])
        return len(indices)

    def _offer(self, index: int, cost: float, res: MeasureRecordResult | None = None) -> bool:
        """Keep config `index` (its mean cost, inf for a failure, and its result when there is
        one) as the best when it is; True when it was."""
        if math.isfinite(cost) and cost < self.best_cost:
            self.best_cost, self.best_index, self.best_result = cost, index, res
            return True
        return False

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    # ---- the loop shared by all tuners ----

    def tune(
        self,
        n_trial: int,
        measurer: Measurer | None = None,
        callbacks: Sequence[MeasureCallback] = (),
        early_stopping: int | None = None,
        batch_size: int = 8,
    ) -> MeasureRecordResult | None:
        """Measure up to `n_trial` configs; stop early after `early_stopping` trials without a
        better one. Returns the best result, a loaded one included (None when nothing measured
        correctly)."""
        measurer = measurer or _default_measurer(self.task)
        best_trial = self.trials
        dag = self.task.compute_dag.serialized()
        while self.trials < n_trial and self.has_next():
            indices = self.next_batch(min(batch_size, n_trial - self.trials))
            indices = [i for i in dict.fromkeys(indices) if i not in self.visited]
            if not indices:
                break
            self.visited.update(indices)
            inputs, results = self._measure(indices, measurer, dag)
            for cb in callbacks:
                cb(inputs, results)
            self.update(indices, [r.mean_cost for r in results])
            for index, res in zip(indices, results, strict=True):
                self.trials += 1
                if self._offer(index, res.mean_cost, res):
                    best_trial = self.trials
            if early_stopping is not None and self.trials - best_trial >= early_stopping:
                break
        return self.best_result

    def _measure(
        self, indices: list[int], measurer: Measurer, dag: dict
    ) -> tuple[list[MeasureInput], list[MeasureRecordResult]]:
        """States of the configs (an illegal one is an instantiation error, not measured)."""
        results: list[MeasureRecordResult | None] = [None] * len(indices)
        inputs, states, slots = [], [], []
        for i, index in enumerate(indices):
            config = self.space.get(index)
            try:
                state = self.task.instantiate(config)
            except AutoschedError as exc:
                kind = int(MeasureErrorKind.INSTANTIATION_ERROR)
                results[i] = MeasureRecordResult((), kind, str(exc), timestamp=now())
                steps: tuple = ()
            else:
                states.append(state)
                slots.append(i)
                steps = state.key()
            key = self.task.workload_key
            inputs.append(MeasureInput(key, steps, dag=dag, config=config.to_dict()))
        if states:
            for i, res in zip(slots, measurer.measure(states), strict=True):
                results[i] = res
        return inputs, [r for r in results if r is not None]

    # ---- the search policy interface (protocols.SearchPolicy) ----

    def search_one_round(self, num_measure: int) -> list[State]:
        """States of up to `num_measure` configs not visited yet; a config that cannot be
        instantiated, or whose State an earlier config made (knobs that do not change the
        program, such as an unroll of a loop of one), counts as visited and is left out."""
        states: list[State] = []
        while not states and self.has_next():
            batch = self.next_batch(num_measure)
            indices = [i for i in dict.fromkeys(batch) if i not in self.visited]
            if not indices:
                break
            self.visited.update(indices)
            for index in indices:
                try:
                    state = self.task.instantiate(self.space.get(index))
                except AutoschedError:
                    continue
                if state.key() in self._index_of:
                    continue
                self._index_of[state.key()] = index
                states.append(state)
        return states

    def add_measured(self, state: State, cost: float) -> None:
        """Count a measured State of this tuner's configs; keep it when it is the best."""
        self.trials += 1
        self._offer(self._index_of[state.key()], cost)

    def update_model(self, states: Sequence[State], costs: Sequence[float]) -> None:
        """`update` with the configs of a measured batch."""
        self.update([self._index_of[s.key()] for s in states], costs)

    def best_state(self) -> tuple[float, State] | None:
        """(cost, State) of the best config measured or loaded, or None."""
        if self.best_index is None:
            return None
        return self.best_cost, self.task.instantiate(self.space.get(self.best_index))

    @property
    def best_config(self):
        """The best config measured so far (None before any correct measurement)."""
        return None if self.best_index is None else self.space.get(self.best_index)


class RandomTuner(Tuner):
    """Configs drawn uniformly without repetition."""

    def next_batch(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n and len(self.visited) + len(out) < len(self.space):
            index = self.rng.randrange(len(self.space))
            if index not in self.visited and index not in out:
                out.append(index)
        return out


class GridSearchTuner(Tuner):
    """Configs in index order."""

    def __init__(self, task, seed: int = 0) -> None:
        super().__init__(task, seed)
        self.counter = 0

    def next_batch(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n and self.counter < len(self.space):
            if self.counter not in self.visited:
                out.append(self.counter)
            self.counter += 1
        return out


class GATuner(Tuner):
    """A genetic algorithm on the knobs' entity indices: the fittest configs (1 / cost) breed by
    uniform crossover of their knobs, and each knob mutates with `mutation_prob`."""

    def __init__(self, task, pop_size: int = 16, elite_num: int = 4, mutation_prob: float = 0.1,
                 seed: int = 0) -> None:  # fmt: skip
        super().__init__(task, seed)
        self.pop_size, self.elite_num, self.mutation_prob = pop_size, elite_num, mutation_prob
        self.scores: dict[int, float] = {}
        self.lengths = [len(s) for s in self.space.space_map.values()]

    def update(self, indices: Sequence[int], costs: Sequence[float]) -> None:
        for index, cost in zip(indices, costs, strict=True):
            self.scores[index] = 1.0 / cost if math.isfinite(cost) else 0.0

    def next_batch(self, n: int) -> list[int]:
        ranked = sorted(self.scores, key=self.scores.__getitem__, reverse=True)[: self.pop_size]
        parents = [i for i in ranked if self.scores[i] > 0][: max(self.elite_num, 2)]
        out: list[int] = []
        for _ in range(64 * n):
            if len(out) >= n or len(self.visited) + len(out) >= len(self.space):
                break
            index = self._child(parents) if len(parents) >= 2 else None
            if index is None:
                index = self.rng.randrange(len(self.space))
            if index not in self.visited and index not in out:
                out.append(index)
        return out

    def _child(self, parents: list[int]) -> int:
        a, b = (self.space.knob_indices(p) for p in self.rng.sample(parents, 2))
        genes = [self.rng.choice(pair) for pair in zip(a, b, strict=True)]
        for k, n in enumerate(self.lengths):
            if self.rng.random() < self.mutation_prob:
                genes[k] = self.rng.randrange(n)
        return self.space.index_of(genes)
