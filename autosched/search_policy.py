"""The sketch search policy: sketches once, then rounds of evolutionary search guided by the
cost model, an epsilon-greedy share of random states, and never a state measured twice."""

from __future__ import annotations

import heapq
import math
import random
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from .cost_model import XGBModel, state_features, throughput
from .records import load_records
from .transform_steps import PragmaStep, SplitStep


@dataclass(frozen=True)
class SearchParams:
    """All knobs of the search, with Ansor's defaults scaled to a Python search."""

    population: int = 512
    generations: int = 3
    mutation_prob: float = 0.85
    eps_greedy: float = 0.05
    sample_init_min_population: int = 50
    use_measured_ratio: float = 0.2
    max_innermost_factor: int = 64
    unroll_choices: tuple = (0, 16, 64, 512, 1024)
    mutation_weights: tuple = (("tile_size", 0.9), ("auto_unroll", 0.1))
    n_jobs: int = 1
    seed: int = 0


def _divisors(n: int) -> list[int]:
    return [d for d in range(2, n + 1) if n % d == 0]


def mutate_tile_size(state, rng: random.Random, params: SearchParams):
    """Move a divisor from one level of a split to another (the product stays the extent)."""
    splits = [i for i, s in enumerate(state.steps) if isinstance(s, SplitStep)
              and s.extent is not None and None not in s.lengths and len(s.lengths) > 1]
    if not splits:
        return None
    k = rng.choice(splits)
    step = state.steps[k]
    outer = step.extent // math.prod(step.lengths) if step.extent % math.prod(step.lengths) == 0 else None
    if outer is None:
        return None
    levels = [outer, *step.lengths]
    src = rng.choice([i for i, v in enumerate(levels) if v > 1] or [0])
    if levels[src] <= 1:
        return None
    d = rng.choice(_divisors(levels[src]))
    dst = rng.choice([i for i in range(len(levels)) if i != src])
    levels[src] //= d
    levels[dst] *= d
    if levels[-1] > params.max_innermost_factor:
        return None
    new = replace(step, lengths=tuple(levels[1:]))
    return _replay_with(state, k, new)


def mutate_auto_unroll(state, rng: random.Random, params: SearchParams):
    """Pick another auto_unroll_max_step for a pragma step."""
    prs = [i for i, s in enumerate(state.steps) if isinstance(s, PragmaStep) and s.pragma_type.startswith("auto_unroll")]
    if not prs:
        return None
    k = rng.choice(prs)
    value = rng.choice(params.unroll_choices)
    return _replay_with(state, k, replace(state.steps[k], pragma_type=f"auto_unroll_max_step${value}"))


MUTATIONS: dict[str, Callable] = {"tile_size": mutate_tile_size, "auto_unroll": mutate_auto_unroll}


def _replay_with(state, k: int, step):
    steps = list(state.steps)
    steps[k] = step
    try:
        return state.dag.replay_steps(steps)
    except Exception:
        return None


class PreloadMeasuredStates:
    """Init-search callback: mark a log's states of this task measured, seed the population."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, policy: "SketchPolicy") -> None:
        dag = policy.task.compute_dag
        for inp, res in load_records(self.path):
            if inp.workload_key != policy.task.workload_key:
                continue
            try:
                state = dag.replay_steps(inp.steps)
            except Exception:
                continue
            policy.add_measured(state, res.mean_cost)


class SketchPolicy:
    """Ansor's search policy for one task."""

    def __init__(self, task, cost_model=None, params: SearchParams | None = None,
                 init_search_callbacks: Sequence[Callable] = (), verbose: int = 1) -> None:
        from .sketch import SketchSampler, generate_sketches

        self.task = task
        self.params = params or SearchParams()
        self.cost_model = cost_model if cost_model is not None else XGBModel(seed=self.params.seed, nthread=1)
        self.rng = random.Random(self.params.seed)
        self.np_rng = np.random.default_rng(self.params.seed)
        self.verbose = verbose
        self.sketches = generate_sketches(task.compute_dag, hardware=task.hardware_params)
        # One sampler for the whole search: it analyses each sketch once, not every round.
        self.sampler = SketchSampler(self.sketches, task.hardware_params)
        self.measured: dict[str, float] = {}  # fingerprint -> mean cost
        self.measured_states: list[tuple[float, object]] = []  # (cost, state)
        self.time = {"search": 0.0, "model": 0.0}
        for cb in init_search_callbacks:
            cb(self)

    # ---- bookkeeping -------------------------------------------------------------------------
    def add_measured(self, state, cost: float) -> None:
        self.measured[state.fingerprint()] = cost
        if math.isfinite(cost):
            self.measured_states.append((cost, state))

    def best_measured(self, k: int) -> list:
        return [s for _, s in sorted(self.measured_states, key=lambda x: x[0])[:k]]

    # ---- one round ---------------------------------------------------------------------------
    def sample_init(self, n: int) -> list:
        return self.sampler.sample(n, self.rng)

    def score(self, states: list) -> np.ndarray:
        feats = state_features(states, self.params.n_jobs)
        scores = np.asarray(self.cost_model.predict(feats), dtype=float)
        return scores

    def evolutionary_search(self, init: list, out_size: int) -> list:
        p = self.params
        pop = list(init)
        best: dict[str, tuple[float, object]] = {}
        for gen in range(p.generations + 1):
            if not pop:
                break
            scores = self.score(pop)
            for s, sc in zip(pop, scores):
                fp = s.fingerprint()
                if fp not in self.measured and math.isfinite(sc) and (fp not in best or best[fp][0] < sc):
                    best[fp] = (float(sc), s)
            if gen == p.generations:
                break
            finite = np.where(np.isfinite(scores), scores, np.nan)
            if np.all(np.isnan(finite)):
                break
            w = np.nan_to_num(finite - np.nanmin(finite), nan=0.0) + 1e-9
            w = w / w.sum()
            names = [n for n, _ in p.mutation_weights]
            mw = [x for _, x in p.mutation_weights]
            nxt = []
            tries = 0
            while len(nxt) < p.population and tries < p.population * 4:
                tries += 1
                parent = pop[int(self.np_rng.choice(len(pop), p=w))]
                child = parent
                if self.rng.random() < p.mutation_prob:
                    child = MUTATIONS[self.rng.choices(names, mw)[0]](parent, self.rng, p)
                if child is not None:
                    nxt.append(child)
            pop = nxt
        ranked = heapq.nlargest(out_size, best.values(), key=lambda x: x[0])
        return [s for _, s in ranked]

    def search_one_round(self, num_measure: int) -> list:
        """The next batch of unmeasured states to measure."""
        t0 = time.perf_counter()
        p = self.params
        n_random = max(1, int(p.eps_greedy * num_measure)) if num_measure > 1 else 0
        init = self.sample_init(max(p.sample_init_min_population, p.population))
        n_measured = int(p.use_measured_ratio * len(init))
        init = init + self.best_measured(n_measured)
        chosen, seen = [], set()
        for s in self.evolutionary_search(init, 2 * num_measure):
            fp = s.fingerprint()
            if fp not in seen and fp not in self.measured and len(chosen) < num_measure - n_random:
                chosen.append(s)
                seen.add(fp)
        self.rng.shuffle(init)
        for s in init:
            if len(chosen) >= num_measure:
                break
            fp = s.fingerprint()
            if fp not in seen and fp not in self.measured:
                chosen.append(s)
                seen.add(fp)
        self.time["search"] += time.perf_counter() - t0
        return chosen

    def update_model(self, states: list, costs: list[float]) -> None:
        t0 = time.perf_counter()
        feats = state_features(states, self.params.n_jobs)
        keep = [i for i, f in enumerate(feats) if f is not None]
        flop = self.task.compute_dag.flop_count
        if keep:
            self.cost_model.update([feats[i] for i in keep],
                                   np.array([throughput(flop, costs[i]) for i in keep]),
                                   task_ids=[self.task.workload_key] * len(keep))
        self.time["model"] += time.perf_counter() - t0
