"""The sketch search's settings (`SearchParams`), and the one check every search's settings
class runs on construction, so that a bad setting is named in one line instead of failing deep
in a search."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autosched.search.mutations import MUTATIONS


def check_settings(owner: str, checks: Iterable[tuple[bool, str]]) -> None:
    """Raise ValueError naming `owner` and the first failed check's message."""
    for ok, message in checks:
        if not ok:
            raise ValueError(f"{owner}: {message}")


@dataclass(frozen=True)
class SearchParams:
    """All knobs of the search, with Ansor's defaults where Ansor has the knob (local_share,
    shape_share, launch_cap and sketch_floor are this search's own). The evolutionary search
    scores 2048 states over 4 generations: with a quarter of that (512 over 3) the search often
    missed the states its model ranks best, and 256-trial runs ended slower
    (benchmarks/results/2026-11-23_8d48a45_h100/note.md compares them)."""

    population: int = 2048
    generations: int = 4
    mutation_prob: float = 0.85
    eps_greedy: float = 0.05
    sample_init_min_population: int = 50  # fresh samples per round, at least
    use_measured_ratio: float = 0.2  # best measured states in the initial population, at most
    # share of a model-steered round given to the best-scored neighbours (one mutation away) of
    # the local_parents fastest measured states, the parents taking turns: a hedge against a
    # model that ranks an unmeasured region above the neighbourhood of the measured best
    local_share: float = 0.0
    local_parents: int = 4
    local_tries: int = 64  # mutations tried per parent
    # share of a model-steered round given to variants of the block shapes (a block's threads
    # per spatial axis) that rank after the fastest: one mutation away from the fastest state
    # of each of the shape_parents next shapes, keeping its block shape. A shape's first random
    # states can be several times slower than its best (conv2d_bias_relu's fastest shape, met
    # by every run's first round, was left by the runs that drew it badly); 0: off
    shape_share: float = 0.0
    shape_parents: int = 8
    # at most this many of a steered round's model picks share one launch shape (grid, block,
    # virtual threads, shared and local bytes: the tiling, with the finer decisions such as the
    # unroll depth and the inner reduction split left out); the rest of the batch goes to the
    # next-best shapes, and only a round short of shapes takes more. A model that ranks one
    # tiling first ranks its near-copies next to it: uncapped, a round measures a few tilings
    # many times over, and a long search settles on one tiling and misses a faster one a few
    # mutations away (benchmarks/results/2026-11-25_e30b405_h100/note.md). 0: no cap
    launch_cap: int = 4
    # at least this many of a steered round's model picks come from each sketch (its
    # best-scored candidates of the round): a sketch whose first random states were slow is
    # otherwise scored low and left for good, as conv2d_bias_relu's 16-part split sketch, its
    # fastest, was in a third of the runs (benchmarks/results/2026-11-26_8810daf_h200x2). 0: off
    sketch_floor: int = 0
    mutation_weights: tuple = (("tile_size", 0.8), ("auto_unroll", 0.1), ("crossover", 0.1))
    empty_round_retries: int = 3  # searches more when a round finds nothing new to measure
    feature_cache_size: int = 16384  # candidates whose features are kept (a few KB each)
    # worker processes (spawned without re-running the main script: no guard needed):
    # None = one per CPU core, 1 = all in this process
    n_jobs: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        share = "must be in [0, 1]"
        checks = [
            (self.population >= 1, "population must be >= 1"),
            (self.generations >= 0, "generations must be >= 0"),
            (0 <= self.mutation_prob <= 1, f"mutation_prob {share}"),
            (0 <= self.eps_greedy <= 1, f"eps_greedy {share}"),
            (self.sample_init_min_population >= 0, "sample_init_min_population must be >= 0"),
            (0 <= self.use_measured_ratio <= 1, f"use_measured_ratio {share}"),
            (0 <= self.local_share <= 1, f"local_share {share}"),
            (self.local_parents >= 1, "local_parents must be >= 1"),
            (0 <= self.shape_share <= 1, f"shape_share {share}"),
            (self.shape_parents >= 1, "shape_parents must be >= 1"),
            (self.local_tries >= 1, "local_tries must be >= 1"),
            (self.launch_cap >= 0, "launch_cap must be >= 0 (0: no cap)"),
            (self.sketch_floor >= 0, "sketch_floor must be >= 0 (0: off)"),
            (self.empty_round_retries >= 0, "empty_round_retries must be >= 0"),
            (self.feature_cache_size >= 1, "feature_cache_size must be >= 1"),
            (self.n_jobs is None or self.n_jobs >= 1, "n_jobs must be None or >= 1"),
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
