"""autosched's side of the cost models: states -> features -> costmodel/ learners.

`costmodel/` only sees numpy arrays; this module turns States and record logs into them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import costmodel
from autosched.records import load_records
from autosched.search.workers import features_for_states


def throughput(flop: float, cost: float) -> float:
    """Normalised speed of a measured program (higher is better); 0 for failures."""
    return 0.0 if not math.isfinite(cost) or cost <= 0 else flop / cost / 1e9


@dataclass
class Dataset:
    """Measured programs of a record log as cost-model input: one feature matrix, throughput
    (GFLOP/s, 0 for a failed measurement) and workload key per program that lowered."""

    features: list[np.ndarray]
    throughputs: np.ndarray
    task_ids: list[str]

    def __len__(self) -> int:
        return len(self.features)

    def subset(self, index: Sequence[int]) -> Dataset:
        """The programs at `index`, in that order."""
        return Dataset(
            [self.features[i] for i in index],
            self.throughputs[list(index)],
            [self.task_ids[i] for i in index],
        )


def load_dataset(path: str, n_jobs: int = 1) -> Dataset:
    """Replay every record of a log and extract its features (records whose steps no longer
    replay, or whose state no longer lowers, are left out)."""
    from autosched.schedule.compute_dag import ComputeDAG

    dags: dict[str, ComputeDAG] = {}
    states, thr, tasks = [], [], []
    for inp, res in load_records(path):
        dag = dags.get(inp.workload_key)
        if dag is None:
            dag = dags[inp.workload_key] = ComputeDAG.from_workload_key(inp.workload_key)
        try:
            states.append(dag.replay_steps(inp.steps))
        except Exception:  # a record from an older schedule space: skip it
            continue
        thr.append(throughput(dag.flop_count, res.mean_cost))
        tasks.append(inp.workload_key)
    feats = features_for_states(states, n_jobs) if states else []
    keep = [i for i, f in enumerate(feats) if f is not None]
    return Dataset(
        [feats[i] for i in keep],
        np.array([thr[i] for i in keep], dtype=np.float64),
        [tasks[i] for i in keep],
    )


def holdout_ranking(
    make_model, data: Dataset, holdout: float = 0.2, seed: int = 0
) -> dict[str, dict]:
    """Train `make_model()` on all but a random `holdout` fraction of each workload's programs,
    then score the held-out correct programs per workload: pairwise ranking accuracy and the
    recall of the true top-5% in the predicted top-10%. Returns {workload key: figures}."""
    rng = np.random.default_rng(seed)
    train, test = [], {}
    for task in sorted(set(data.task_ids)):
        index = rng.permutation([i for i, t in enumerate(data.task_ids) if t == task])
        cut = int(round(len(index) * holdout))
        test[task] = index[:cut]
        train.extend(index[cut:])
    model = make_model()
    part = data.subset(train)
    model.fit(part.features, part.throughputs, task_ids=part.task_ids)
    report = {}
    for task, index in test.items():
        ok = [i for i in index if data.throughputs[i] > 0]
        held = data.subset(ok)
        pred = model.predict(held.features)
        report[task] = {
            "train": int(sum(1 for i in train if data.task_ids[i] == task)),
            "test_correct": len(ok),
            "pairwise_accuracy": costmodel.pairwise_accuracy(pred, held.throughputs),
            "top5_in_top10_recall": costmodel.topk_recall(pred, held.throughputs, 0.05, 0.10),
        }
    return report


class _FromFileMixin:
    def update_from_file(self, path: str, n_jobs: int = 1) -> int:
        """Train on every record in a log (the seed's resume). Returns the number used."""
        data = load_dataset(path, n_jobs)
        if len(data):
            self.update(data.features, data.throughputs, task_ids=data.task_ids)
        return len(data)


class XGBModel(_FromFileMixin, costmodel.XGBModel):
    """costmodel.XGBModel plus `update_from_file(log)`."""


class RandomModel(_FromFileMixin, costmodel.RandomModel):
    """costmodel.RandomModel plus `update_from_file(log)` (a no-op learner, for ablations)."""
