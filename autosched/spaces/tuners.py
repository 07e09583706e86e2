"""Tuners over a template task's config space (AutoTVM's shape): a tuner proposes config
indices in batches, `tune` instantiates their States, measures them with any measurer (by
default the sketch search's ProgramMeasurer), and hands (MeasureInput, MeasureRecordResult)
pairs to the callbacks, e.g. `RecordToFile` — the inputs carry the config and the DAG.

Here: random, grid (index order) and genetic; the model-guided one is in model_tuner.py.
`load_history(log)` resumes any of them from a log: its configs are never proposed again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from autosched.errors import AutoschedError
from autosched.records import MeasureInput, MeasureRecordResult, load_records, now
from measure import MeasureErrorKind


def _default_measurer(task):
    from autosched.search.program_measurer import ProgramMeasurer

    return ProgramMeasurer(task)


class Tuner:
    """Subclasses give `next_batch(n)`; `update(indices, results)` lets them learn."""

    def __init__(self, task, seed: int = 0) -> None:
        self.task = task
        self.space = task.config_space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()
        self.best_index: int | None = None
        self.best_cost = float("inf")
        self.best_result: MeasureRecordResult | None = None
        self.trials = 0

    # ---- what a tuner decides ----

    def next_batch(self, n: int) -> list[int]:
        """Up to n config indices not measured yet."""
        raise NotImplementedError

    def update(self, indices: Sequence[int], results: Sequence[MeasureRecordResult]) -> None:
        """Learn from a measured batch (nothing, by default)."""

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
            self._offer(index, res)
        if indices:
            self.update(indices, results)
        return len(indices)

    def _offer(self, index: int, res: MeasureRecordResult) -> bool:
        """Keep `res` as the best when it is; True when it was."""
        if res.ok and res.mean_cost < self.best_cost:
            self.best_cost, self.best_index, self.best_result = res.mean_cost, index, res
            return True
        return False

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    # ---- the loop shared by all tuners ----

    def tune(
        self,
        n_trial: int,
        measurer=None,
        callbacks: Sequence[Callable] = (),
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
            self.update(indices, results)
            for index, res in zip(indices, results, strict=True):
                self.trials += 1
                if self._offer(index, res):
                    best_trial = self.trials
            if early_stopping is not None and self.trials - best_trial >= early_stopping:
                break
        return self.best_result

    def _measure(self, indices, measurer, dag):
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
        return inputs, results

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

    def update(self, indices, results) -> None:
        for index, res in zip(indices, results, strict=True):
            self.scores[index] = 1.0 / res.mean_cost if res.ok else 0.0

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
