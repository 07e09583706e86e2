"""autosched's side of the cost models: states -> features -> costmodel/ learners.

`costmodel/` only sees numpy arrays; this module turns States and record logs into them.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

import costmodel

from .records import load_records


def throughput(flop: float, cost: float) -> float:
    """Normalised speed of a measured program (higher is better); 0 for failures."""
    return 0.0 if not math.isfinite(cost) or cost <= 0 else flop / cost / 1e9


def state_features(states: Sequence, n_jobs: int = 1) -> list[np.ndarray | None]:
    from .features import features_for_states

    return features_for_states(list(states), n_jobs=n_jobs)


class _FromFileMixin:
    def update_from_file(self, path: str, n_jobs: int = 1) -> int:
        """Train on every record in a log (the seed's resume). Returns the number used."""
        from .compute_dag import ComputeDAG
        from .workload_registry import workload_tensors

        dags: dict[str, ComputeDAG] = {}
        states, thr, tasks = [], [], []
        for inp, res in load_records(path):
            dag = dags.get(inp.workload_key)
            if dag is None:
                dag = dags[inp.workload_key] = ComputeDAG(workload_tensors(inp.workload_key))
                dag.workload_key = inp.workload_key
            try:
                states.append(dag.replay_steps(inp.steps))
            except Exception:  # a record from an older schedule space: skip it
                continue
            thr.append(throughput(dag.flop_count, res.mean_cost))
            tasks.append(inp.workload_key)
        if not states:
            return 0
        feats = state_features(states, n_jobs)
        keep = [i for i, f in enumerate(feats) if f is not None]
        self.update([feats[i] for i in keep], np.array([thr[i] for i in keep]), task_ids=[tasks[i] for i in keep])
        return len(keep)


class XGBModel(_FromFileMixin, costmodel.XGBModel):
    """costmodel.XGBModel plus `update_from_file(log)`."""


class RandomModel(_FromFileMixin, costmodel.RandomModel):
    """costmodel.RandomModel plus `update_from_file(log)` (a no-op learner, for ablations)."""
