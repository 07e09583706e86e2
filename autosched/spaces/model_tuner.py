"""A model-guided tuner (AutoTVM's XGBTuner): each batch is the best-predicted configs of a
candidate pool (random configs and one-knob neighbours of the best measured ones), ranked by the
search's XGBoost cost model on the features of the lowered program; a share `epsilon` of each
batch stays random, so that the model keeps seeing configs it would not pick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autosched.errors import AutoschedError
from autosched.features import state_features
from autosched.spaces.tuners import Tuner


def _default_model(seed: int):
    from costmodel import XGBModel

    return XGBModel(seed=seed, nthread=1, few_shot_threshold=0)


class XGBTuner(Tuner):
    """`model`: any costmodel.CostModel (default XGBModel); `pool_size`: candidates scored per
    batch; `epsilon`: the random share of a batch."""

    def __init__(
        self, task, model=None, pool_size: int = 64, epsilon: float = 0.1, seed: int = 0
    ) -> None:
        super().__init__(task, seed)
        self.model = model if model is not None else _default_model(seed)
        self.pool_size, self.epsilon = pool_size, epsilon
        self.features: dict[int, np.ndarray | None] = {}
        self.costs: dict[int, float] = {}
        self.flop = max(1.0, float(task.compute_dag.flop_count))

    def _features(self, index: int):
        """The lowered program's features of a config (None where it cannot be built)."""
        if index not in self.features:
            try:
                self.features[index] = state_features(self.task.instantiate(index))
            except AutoschedError:
                self.features[index] = None
        return self.features[index]

    def _pool(self) -> list[int]:
        """Unvisited candidates: neighbours of the best measured configs, then random ones."""
        lengths = [len(s) for s in self.space.space_map.values()]
        best = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))[:4]
        pool: set[int] = set()
        for _, index in best:
            genes = self.space.knob_indices(index)
            for k, n in enumerate(lengths):
                if n > 1:
                    neighbour = list(genes)
                    neighbour[k] = self.rng.randrange(n)
                    pool.add(self.space.index_of(neighbour))
        for _ in range(4 * self.pool_size):
            if len(pool) >= self.pool_size:
                break
            pool.add(self.rng.randrange(len(self.space)))
        return sorted(pool - self.visited)

    def next_batch(self, n: int) -> list[int]:
        pool = self._pool()
        if not pool:
            return []
        n_random = 0 if not self.costs else int(round(self.epsilon * n))
        ranked = pool
        if self.costs:  # the model has data: rank by prediction
            scores = self.model.predict([self._features(i) for i in pool])
            ranked = [pool[j] for j in np.argsort(-scores, kind="stable")]
        else:
            self.rng.shuffle(ranked)
        out = ranked[: n - n_random]
        rest = ranked[n - n_random :]
        out += self.rng.sample(rest, min(n_random, len(rest)))
        return out

    def update(self, indices: Sequence[int], costs: Sequence[float]) -> None:
        feats, tps = [], []
        for index, cost in zip(indices, costs, strict=True):
            ok = math.isfinite(cost)
            self.costs[index] = cost
            feats.append(self._features(index) if ok else None)
            tps.append(self.flop / cost / 1e9 if ok and cost > 0 else 0.0)
        self.model.update(feats, np.asarray(tps, dtype=np.float64))
