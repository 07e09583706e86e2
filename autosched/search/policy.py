"""The sketch search policy: sketches once, then rounds of evolutionary search guided by the
cost model, an epsilon-greedy share of random states, and never a state measured twice.

Inside the search a candidate is its tuple of step records (see mutations.py); only the states
picked for measurement are replayed into States. Per-candidate work (sampling, lowering, GPU
limit checks, features) goes through `workers.Workers`, in a process pool when
`SearchParams.n_jobs` allows, and each candidate's features are cached by its records, so a
candidate met again (an unmutated copy, a state of an earlier generation or round, a measured
state when the model is updated) is never lowered twice.

Lowering is what a round costs, so a round starts where the last one ended: the initial
population takes the last round's best-scored unmeasured candidates (`SearchParams.carry_over`),
whose features are cached and cost one model prediction each, beside the best measured states
and fewer fresh samples. The evolution goes on across rounds instead of restarting from random
states, and fewer generations per round reach the same scores.
"""

from __future__ import annotations

import heapq
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from autosched.records import load_records, seal_torn_line
from autosched.search.background import Background
from autosched.search.candidates import as_records, launch_shape, spread_over_sketches
from autosched.search.collector import young_objects_only
from autosched.search.cost_model import default_cost_model, train_on_measured
from autosched.search.mutations import (
    MUTATIONS,
    MutationContext,
    Records,
    TensorCoreChoices,
    tensorized_stages,
)
from autosched.search.params import SearchParams
from autosched.search.workers import TaskContext, TaskSpec, Workers
from autosched.sketch import SketchParams

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State
    from autosched.task.search_task import SearchTask
    from costmodel import CostModel

# An init-search callback: run once on the new policy (resuming, skipping a log's states).
InitCallback = Callable[["SketchPolicy"], None]


class FeatureCache:
    """Features (or the reason a candidate is invalid) by records; the least recently used half
    is dropped when it is full (an entry read is moved to the recent end, so the candidates a
    search carries from round to round stay)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: dict[Records, object] = {}
        self.hits = self.misses = 0
        self.invalid = 0  # of the misses, the candidates found invalid (a reason, no features)

    def __contains__(self, records: Records) -> bool:
        return records in self.entries

    def get(self, records: Records):
        outcome = self.entries.pop(records, None)
        if outcome is not None:
            self.entries[records] = outcome
        return outcome

    def put(self, records: Records, outcome) -> None:
        if len(self.entries) >= self.capacity:
            for key in list(self.entries)[: self.capacity // 2]:
                del self.entries[key]
        self.entries[records] = outcome


class LogCallback:
    """An init-search callback that reads the record log at `path`."""

    def __init__(self, path: str) -> None:
        self.path = path


class PreloadMeasuredStates(LogCallback):
    """Init-search callback (resuming): mark a log's states of this task measured (never
    measured again; the best seed the initial population). A torn last line (a tuner killed
    mid-write) is skipped with a warning and closed with a newline, so that the records this
    search appends to the same log start on lines of their own."""

    def __call__(self, policy: SketchPolicy) -> None:
        for inp, res in logged_records(self.path, policy.task.workload_key):
            policy.add_measured_records(inp.steps, res.mean_cost)


class SkipLoggedStates(LogCallback):
    """Init-search callback (a new search appending to a log that holds earlier ones): the
    log's states of this task are never handed out again, but neither seed the search nor count
    as its results. Without it, a second search into the same log measures again the states
    both searches converge to: independent searches of one task meet some of the same states,
    and the log would hold them twice. A missing log is an empty one; a torn last line is
    closed as PreloadMeasuredStates does."""

    def __call__(self, policy: SketchPolicy) -> None:
        if os.path.exists(self.path):
            for inp, _ in logged_records(self.path, policy.task.workload_key):
                policy.picked.add(as_records(inp.steps))


def logged_records(path: str, workload_key: str) -> Iterator:
    """The (input, result) records of one task in a log; the log's torn last line is sealed
    once they are read."""
    yield from ((i, r) for i, r in load_records(path) if i.workload_key == workload_key)
    seal_torn_line(path)


class SketchPolicy:
    """Ansor's search policy for one task (a `protocols.SearchPolicy`)."""

    def __init__(
        self,
        task: SearchTask,
        cost_model: CostModel | None = None,
        params: SearchParams | None = None,
        init_search_callbacks: Sequence[InitCallback] = (),
        verbose: int = 1,
        sketch_params: SketchParams | None = None,
    ) -> None:
        """`sketch_params`: the SketchParams of sketch generation and random annotation
        (default: `SketchParams.for_task(task)`, which carries the task's TF32 option)."""
        from autosched.sketch import generate_sketches

        self.task = task
        self.params = params or SearchParams()
        # a model made here trains in the background (`update_model`); a given one, which
        # its owner may read or share, trains in the call
        self._owns_model = cost_model is None
        self._model: CostModel = cost_model or default_cost_model(
            self.params.seed, self.params.pretrained
        )
        self._training: Background[None] | None = None
        self.rng = random.Random(self.params.seed)
        self.np_rng = np.random.default_rng(self.params.seed)
        self.verbose = verbose
        # the task's TF32 option reaches the sketch rules here and, through the spec, the workers
        sketch_params = sketch_params or SketchParams.for_task(task)
        self.sketches = generate_sketches(task.compute_dag, task.hardware_params, sketch_params)
        context = TaskContext(task.compute_dag, task.hardware_params, sketch_params, self.sketches)
        self.sampler = context.sampler  # analyses each sketch once, for the whole search
        spec = TaskSpec.of(task.compute_dag, task.hardware_params, sketch_params)
        self.workers = Workers(context, spec, self.params.n_jobs, self.params.worker_niceness)
        self.mutation_ctx = MutationContext(
            sketch_params.max_innermost_split_factor,
            max(sketch_params.vector_lengths),
            sketch_params.auto_unroll_configs,
            sketch_params.tensor_core_unroll_configs,
            TensorCoreChoices.of(self.sampler.plans, sketch_params, context.hardware),
        )
        self.features = FeatureCache(self.params.feature_cache_size)
        self.measured: dict[Records, float] = {}  # records -> mean cost (inf: failed)
        self.picked: set[Records] = set()  # handed out for measurement, never again
        self.fresh_sketch: dict[Records, int] = {}  # the last fresh samples' sketch indices
        self.scores: dict[Records, float] = {}  # this round's model scores
        # the last evolution's best-scored candidates, best first: the next round starts there
        self.carried: list[Records] = []
        # the population the current round evolves (`population_for` its batch size)
        self.round_population = self.params.population
        self.time = {"search": 0.0, "sample": 0.0, "evaluate": 0.0, "predict": 0.0, "model": 0.0}
        # per mutation rule: [children made, failures]
        self.mutation_stats = {name: [0, 0] for name, _ in self.params.mutation_weights}
        self.last_round: dict[str, float] = {}  # what the last round did: times and counts
        self.n_sampled = 0
        for cb in init_search_callbacks:
            cb(self)

    @property
    def cost_model(self) -> CostModel:
        """The search's cost model, once its training in progress (if any) has ended."""
        self._finish_training()
        return self._model

    @cost_model.setter
    def cost_model(self, model: CostModel) -> None:
        self._finish_training()
        self._model = model

    def _finish_training(self) -> None:
        """Wait for the model's training in progress, if any (raising what it raised)."""
        if self._training is not None:
            training, self._training = self._training, None
            training.result()

    # ---- bookkeeping -------------------------------------------------------------------------
    def add_measured(self, state: State, cost: float) -> None:
        """Record a measured state's mean cost (inf for a failure)."""
        self.add_measured_records(state.key(), cost)

    def add_measured_records(self, records: Iterable, cost: float) -> None:
        """Record a measured state's mean cost (inf for a failure), given by its step records
        in any form `as_records` reads."""
        records = as_records(records)
        self.measured[records] = cost
        self.picked.add(records)

    def best_measured(self, k: int) -> list[Records]:
        """The records of the k fastest correct measured states."""
        ok = ((c, r) for r, c in self.measured.items() if math.isfinite(c))
        return [r for _, r in heapq.nsmallest(k, ok, key=lambda x: x[0])]

    def best_state(self) -> tuple[float, State] | None:
        """(cost, State) of the fastest measured state that replays, or None."""
        ok = sorted((c, r) for r, c in self.measured.items() if math.isfinite(c))
        for cost, records in ok:
            try:
                return cost, self.workers.context.replay(records)
            except Exception:  # a record from an older schedule space
                continue
        return None

    # ---- features and scores -----------------------------------------------------------------
    def outcomes(self, candidates: Sequence[Records]) -> list:
        """Features (or the invalidity reason) per candidate, each lowered at most once."""
        known = {r: self.features.get(r) for r in candidates if r in self.features}
        todo = [r for r in dict.fromkeys(candidates) if r not in known]
        self.features.hits += len(candidates) - len(todo)
        self.features.misses += len(todo)
        if todo:
            t0 = time.perf_counter()
            for r, o in zip(todo, self.workers.evaluate(todo), strict=True):
                known[r] = o
                self.features.put(r, o)
                self.features.invalid += not isinstance(o, np.ndarray)
            self.time["evaluate"] += time.perf_counter() - t0
        return [known[r] for r in candidates]

    def score(self, candidates: Sequence[Records]) -> tuple[list[Records], np.ndarray]:
        """The valid candidates and their model scores (this round's model)."""
        outcomes = zip(candidates, self.outcomes(candidates), strict=True)
        valid = {r: o for r, o in outcomes if isinstance(o, np.ndarray)}
        new = [r for r in valid if r not in self.scores]
        if new:
            t0 = time.perf_counter()
            predicted = np.asarray(self.cost_model.predict([valid[r] for r in new]), dtype=float)
            self.scores.update(zip(new, predicted.tolist(), strict=True))
            self.time["predict"] += time.perf_counter() - t0
        kept = [r for r in candidates if r in valid]
        return kept, np.array([self.scores[r] for r in kept])

    # ---- one round ---------------------------------------------------------------------------
    def sample_fresh(self, n: int) -> list[Records]:
        """n fresh random states (their features go to the cache, their sketches to
        fresh_sketch)."""
        t0 = time.perf_counter()
        fresh = []
        self.fresh_sketch.clear()
        for sampled in self.workers.sample(n, self.rng):
            self.features.put(sampled.records, sampled.features)
            self.fresh_sketch[sampled.records] = sampled.sketch
            fresh.append(sampled.records)
        self.n_sampled += len(fresh)
        self.time["sample"] += time.perf_counter() - t0
        return fresh

    def init_population(self) -> tuple[list[Records], list[Records]]:
        """(fresh samples, the initial population): up to use_measured_ratio of the best
        measured, up to carry_over of the last evolution's best unmeasured candidates, and fresh
        samples for the rest (at least sample_init_min_population), round_population in all."""
        p = self.params
        size = self.round_population
        best = self.best_measured(int(p.use_measured_ratio * size))
        n_carried = int(p.carry_over * size)
        carried = [r for r in self.carried if r not in self.picked][:n_carried]
        n_fresh = size - len(best) - len(carried)
        fresh = self.sample_fresh(max(p.sample_init_min_population, n_fresh))
        return fresh, fresh + best + carried

    def evolutionary_search(self, init: list[Records], out_size: int) -> list[Records]:
        """The out_size best-scored unmeasured candidates met over the generations."""
        p = self.params
        pop = list(dict.fromkeys(init))
        best: dict[Records, float] = {}
        for gen in range(p.generations + 1):
            pop, scores = self.score(pop)
            for r, s in zip(pop, scores, strict=True):
                if r not in self.picked and math.isfinite(s):
                    best[r] = s
            if gen == p.generations or not pop:
                break
            pop = self.next_generation(pop, scores)
        n_carried = int(p.carry_over * p.population)
        self.carried = heapq.nlargest(n_carried, best, key=best.__getitem__) if n_carried else []
        return heapq.nlargest(out_size, best, key=best.__getitem__)

    def next_generation(self, pop: list[Records], scores: np.ndarray) -> list[Records]:
        """population children: parents drawn in proportion to score, mutated with
        mutation_prob by a rule drawn by weight (a failed mutation draws again)."""
        p = self.params
        finite = np.where(np.isfinite(scores), scores, np.nan)
        if np.all(np.isnan(finite)):
            return pop
        w = np.nan_to_num(finite - np.nanmin(finite), nan=0.0) + 1e-9
        w /= w.sum()
        draws = iter(self.np_rng.choice(len(pop), size=6 * self.round_population, p=w).tolist())
        every = p.mutation_weights
        plain = tuple((n, w) for n, w in every if not MUTATIONS[n].TENSOR_CORE_ONLY)
        out: list[Records] = []
        for i in draws:
            if len(out) >= self.round_population:
                break
            if self.rng.random() >= p.mutation_prob:
                out.append(pop[i])
                continue
            menu = every if tensorized_stages(pop[i]) else plain
            if not any(w for _, w in menu):  # only Tensor Core rules, and no Tensor Core stage
                out.append(pop[i])
                continue
            name = self.rng.choices([n for n, _ in menu], [w for _, w in menu])[0]
            rule = MUTATIONS[name]
            parents = [pop[i]] + [pop[next(draws, i)] for _ in range(rule.N_PARENTS - 1)]
            child = rule.apply(self.mutation_ctx, parents, self.rng)
            self.mutation_stats[name][child is None] += 1
            if child is not None:
                out.append(child)
        return out

    def capped(self, ranked: list[Records]) -> list[Records]:
        """`ranked` with the candidates beyond `launch_cap` of one launch shape moved behind the
        others (each part keeps its order); unchanged without a cap."""
        cap = self.params.launch_cap
        if not cap:
            return ranked
        count: dict[tuple, int] = {}
        within: list[Records] = []
        beyond: list[Records] = []
        for r in ranked:
            shape = launch_shape(self.features.get(r))
            count[shape] = count.get(shape, 0) + 1
            (within if count[shape] <= cap else beyond).append(r)
        return within + beyond

    @property
    def model_guesses(self) -> bool:
        """Whether the cost model ranks at random for now (XGBModel before few_shot_threshold
        programs, without a pre-trained model to rank with). Such a round is drawn from the
        fresh samples alone: an evolution scored at random only reshuffles them, and it favours
        the sketches with the most distinct states, which starves a sketch with a small space (a
        cross-thread reduction beside a multi-level tiling) even where that sketch holds the
        fastest states."""
        return self.cost_model.uses_random_fallback

    def pick(self, ranked: list[Records], fresh: list[Records], num: int) -> list[Records]:
        """num unmeasured candidates: the best ranked, and an eps-greedy share of fresh random
        states (Ansor's PickStatesWithEpsGreedy), those taking each sketch in turn; all fresh
        when nothing is ranked."""
        n_random = max(1, int(self.params.eps_greedy * num)) if num > 1 else 0
        randoms = spread_over_sketches(
            [r for r in fresh if r not in self.picked], self.fresh_sketch, self.rng
        )
        out: list[Records] = []
        sources = (iter(ranked), iter(randoms))
        while len(out) < num:
            first = 0 if len(out) < num - n_random else 1
            r = next(sources[first], None) or next(sources[1 - first], None)
            if r is None:
                break
            if r not in self.picked:
                self.picked.add(r)
                out.append(r)
        return out

    def population_for(self, num_measure: int) -> int:
        """The population a round that measures num_measure candidates evolves:
        population_per_trial a candidate, at least min_round_population, at most population
        (a model's warm-up rounds of a few candidates each search that much less)."""
        p = self.params
        wanted = max(p.min_round_population, p.population_per_trial * num_measure)
        return min(p.population, wanted)

    def search_one_round(self, num_measure: int) -> list[State]:
        """The next batch (up to num_measure States) never measured or handed out before; it
        searches again, up to empty_round_retries times, when a round finds nothing new."""
        t0 = time.perf_counter()
        self.round_population = self.population_for(num_measure)
        self.scores = {}  # the model may have changed since the last round
        before = self._counters()
        with young_objects_only():  # the collector leaves the search's long-lived objects
            batch = self._search_batch(num_measure)
        states = [self.workers.context.replay(r) for r in batch]
        self.time["search"] += time.perf_counter() - t0
        self.last_round = {k: v - before[k] for k, v in self._counters().items()}
        if self.verbose >= 2:
            print(
                "search: "
                + "  ".join(
                    f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in self.last_round.items()
                )
            )
        return states

    def _search_batch(self, num_measure: int) -> list[Records]:
        """The records of search_one_round's batch (see there)."""
        batch: list[Records] = []
        for attempt in range(1 + self.params.empty_round_retries):
            fresh, init = self.init_population()
            if self.model_guesses:
                ranked = []
            else:
                wanted = (4 if self.params.launch_cap else 2) * num_measure
                ranked = self.capped(self.evolutionary_search(init, wanted))
            batch = self.pick(ranked, fresh, num_measure)
            if batch:
                break
            if self.verbose:
                print(f"search round {attempt + 1} found nothing new to measure; searching again")
        return batch

    def _counters(self) -> dict[str, float]:
        """Running totals whose per-round differences describe a round (last_round)."""
        return {
            "sample_s": self.time["sample"],
            "evaluate_s": self.time["evaluate"],
            "predict_s": self.time["predict"],
            "worker_cpu_s": self.workers.cpu_seconds,
            "sampled": self.n_sampled,
            "evaluated": self.features.misses,
            "invalid": self.features.invalid,
            "cache_hits": self.features.hits,
        }

    def update_model(self, states: Sequence[State], costs: Sequence[float]) -> None:
        """Train the cost model on a measured batch (features from the cache). A model this
        policy made trains in a background thread, until the search next reads it
        (`cost_model`): the next round's fresh samples are drawn meanwhile, as they need no
        model, and the round waits for the training only where it scores."""
        outcomes = self.outcomes([s.key() for s in states])
        keep = [i for i, o in enumerate(outcomes) if isinstance(o, np.ndarray)]
        model = self.cost_model  # the last training ends first
        features, kept_costs = [outcomes[i] for i in keep], [costs[i] for i in keep]

        def train() -> None:
            t0 = time.perf_counter()
            try:
                train_on_measured(model, self.task, features, kept_costs)
            finally:
                self.time["model"] += time.perf_counter() - t0

        if not self._owns_model:
            train()
            return
        self._training = Background(train, "cost-model-training")
        self._training.start()
