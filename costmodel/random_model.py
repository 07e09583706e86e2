"""A cost model that ranks at random: the baseline for ablations of the learned model."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from costmodel.base import (
    CostModel,
    FeatureMatrix,
    check_throughputs,
    pack_features,
    read_model_file,
    rng_from_json,
    rng_state_to_json,
    write_model_file,
)


class RandomModel(CostModel):
    """Scores every valid program uniformly at random in [0, 1); invalid ones get ``-inf``.

    ``fit`` and ``update`` only validate their arguments and count programs; nothing is learned.
    Two models built with the same seed return the same sequence of scores.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._n_programs = 0

    @property
    def n_programs(self) -> int:
        """How many measured programs ``fit``/``update`` have been given (and ignored)."""
        return self._n_programs

    def fit(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> None:
        """Validate the data and forget it (nothing to learn)."""
        self._n_programs = 0
        self.update(features, throughputs, task_ids)

    def update(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> None:
        """Validate the data and count it (nothing to learn)."""
        packed = pack_features(features)
        check_throughputs(throughputs, packed.n_programs)
        self._n_programs += packed.n_programs

    def predict(self, features: Sequence[FeatureMatrix]) -> np.ndarray:
        """Uniform random scores in [0, 1) for valid programs, ``-inf`` for invalid ones."""
        packed = pack_features(features)
        scores = self._rng.uniform(0.0, 1.0, packed.n_programs)
        scores[~packed.valid] = -np.inf
        return scores

    def save(self, path: str | os.PathLike) -> None:
        """Write the seed and the current random state, so a loaded copy continues the sequence."""
        meta = {
            "kind": "random",
            "seed": self.seed,
            "n_programs": self._n_programs,
            "rng_state": rng_state_to_json(self._rng),
        }
        write_model_file(path, meta, {})

    @classmethod
    def load(cls, path: str | os.PathLike) -> RandomModel:
        """Read a model written by ``save``."""
        meta, _ = read_model_file(path, "random")
        model = cls(seed=meta["seed"])
        model._n_programs = int(meta["n_programs"])
        model._rng = rng_from_json(meta["rng_state"])
        return model
