"""The sketch search's settings (`SearchParams`), and the one check every search's settings
class runs on construction, so that a bad setting is named in one line instead of failing deep
in a search."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autosched.search import tensor_core_mutations  # noqa: F401  (registers its mutations)
from autosched.search.mutations import MUTATIONS
from autosched.search.process_pool import COMPILERS_FIRST


def check_settings(owner: str, checks: Iterable[tuple[bool, str]]) -> None:
    """Raise ValueError naming `owner` and the first failed check's message."""
    for ok, message in checks:
        if not ok:
            raise ValueError(f"{owner}: {message}")


@dataclass(frozen=True)
class SearchParams:
    """All knobs of the search, with Ansor's defaults where Ansor has the knob, but for the size
    of a round's evolution (launch_cap and carry_over are this search's own). Ansor scores 2048
    fresh states over 4 generations in every round; lowering a candidate is what a round costs
    here, so a round starts from the last one's best-scored candidates (carry_over) and evolves
    1024 states over 2 generations: the evolution goes on across rounds, and a search ends as
    good after the same trials (best simulated cost of a search against `tests/sim_measurer`)
    while lowering about a quarter as many candidates per round. Without carry_over, a quarter
    of Ansor's evolution often missed the states its model ranks best, and short searches ended
    slower. A round that measures few candidates (a model's warm-up round for each of its many
    tasks) evolves fewer states: `population_per_trial` per candidate, at least
    `min_round_population`, at most `population`."""

    population: int = 1024
    generations: int = 2
    population_per_trial: int = 16  # a round's population per candidate it measures
    min_round_population: int = 256
    mutation_prob: float = 0.85
    eps_greedy: float = 0.05
    sample_init_min_population: int = 50  # fresh samples per round, at least
    use_measured_ratio: float = 0.2  # best measured states in the initial population, at most
    # the last round's best-scored unmeasured candidates in the initial population, at most (a
    # share of it): their features are cached, so they cost a model prediction where a fresh
    # sample costs a lowering, and the evolution resumes where it stopped. 0: every round
    # starts from fresh samples, as Ansor's does
    carry_over: float = 0.75
    # at most this many of a steered round's model picks share one launch shape (grid, block,
    # virtual threads, shared and local bytes: the tiling, with the finer decisions such as the
    # unroll depth and the inner reduction split left out); the rest of the batch goes to the
    # next-best shapes, and only a round short of shapes takes more. A model that ranks one
    # tiling first ranks its near-copies next to it: uncapped, a round measures a few tilings
    # many times over, and a long search settles on one tiling and misses a faster one a few
    # mutations away. 0: no cap
    launch_cap: int = 4
    # the rules and their weights; a rule that changes only Tensor Core stages
    # (`Mutation.TENSOR_CORE_ONLY`) is drawn for their candidates only, so the other candidates
    # draw among the rest with the same odds as without it
    mutation_weights: tuple = (
        ("tile_size", 0.8),
        ("auto_unroll", 0.1),
        ("crossover", 0.1),
        ("tensor_core_instruction", 0.05),
        ("pipeline_stages", 0.05),
        ("fragment_double_buffer", 0.05),
        ("operand_copy", 0.05),
        ("warp_specialize", 0.05),
        ("warpgroup_tile", 0.05),
    )
    empty_round_retries: int = 3  # searches more when a round finds nothing new to measure
    feature_cache_size: int = 16384  # candidates whose features are kept (a few KB each)
    # worker processes (spawned without re-running the main script: no guard needed):
    # None = one per CPU core, 1 = all in this process
    n_jobs: int | None = None
    # how far the worker processes step back behind the builder's compilers (a niceness, 0-19).
    # Where the rounds of several tasks are in flight, the compilers come first and the search
    # takes the cores they leave idle. In one task's pipelined loop (`autosched tune`) the
    # search of the next batch is what a round waits for, and the compilers of the next batch
    # fill the cores beside the end of the one before: there the search steps back for nothing
    # and `autosched tune` uses 0
    worker_niceness: int = COMPILERS_FIRST
    seed: int = 0
    # the search's default cost model ranks with the model shipped in the package, pre-trained
    # on other workloads' measurements, until it has trained on enough of the task's own
    # (costmodel/pretrained.py): the first round is steered instead of random. False: random
    pretrained: bool = True

    def __post_init__(self) -> None:
        share = "must be in [0, 1]"
        checks = [
            (self.population >= 1, "population must be >= 1"),
            (self.population_per_trial >= 1, "population_per_trial must be >= 1"),
            (self.min_round_population >= 1, "min_round_population must be >= 1"),
            (self.generations >= 0, "generations must be >= 0"),
            (0 <= self.mutation_prob <= 1, f"mutation_prob {share}"),
            (0 <= self.eps_greedy <= 1, f"eps_greedy {share}"),
            (self.sample_init_min_population >= 0, "sample_init_min_population must be >= 0"),
            (0 <= self.use_measured_ratio <= 1, f"use_measured_ratio {share}"),
            (0 <= self.carry_over <= 1, f"carry_over {share}"),
            (self.launch_cap >= 0, "launch_cap must be >= 0 (0: no cap)"),
            (self.empty_round_retries >= 0, "empty_round_retries must be >= 0"),
            (self.feature_cache_size >= 1, "feature_cache_size must be >= 1"),
            (self.n_jobs is None or self.n_jobs >= 1, "n_jobs must be None or >= 1"),
            (0 <= self.worker_niceness <= 19, "worker_niceness must be in [0, 19]"),
        ]
        check_settings("SearchParams", checks)
        unknown = [name for name, _ in self.mutation_weights if name not in MUTATIONS]
        if unknown:
            raise ValueError(
                f"SearchParams: mutation_weights names {unknown}; the mutations are "
                f"{sorted(MUTATIONS)}"
            )
        weights = [w for _, w in self.mutation_weights]
        if not weights or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(
                "SearchParams: mutation_weights must be non-negative with a positive sum"
            )
