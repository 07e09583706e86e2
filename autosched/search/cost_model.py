"""autosched's side of the cost models: states -> features -> costmodel/ learners.

`costmodel/` only sees numpy arrays; this module turns States and record logs into them.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import costmodel
from autosched.errors import AutoschedError
from autosched.features import FEATURE_NAMES
from autosched.records import Record, load_records
from autosched.search.workers import features_for_states

if TYPE_CHECKING:
    from autosched.task.search_task import SearchTask


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

    @classmethod
    def joined(cls, parts: Sequence[Dataset]) -> Dataset:
        """The programs of every part, in order."""
        return cls(
            [f for d in parts for f in d.features],
            np.concatenate([d.throughputs for d in parts]) if parts else np.zeros(0),
            [t for d in parts for t in d.task_ids],
        )

    def without_tasks(self, task_ids: Iterable[str]) -> Dataset:
        """The programs of every other task."""
        drop = set(task_ids)
        return self.subset([i for i, t in enumerate(self.task_ids) if t not in drop])

    def save(self, path: str) -> None:
        """Write the programs to one compressed `.npz` file, tagged with the feature layout
        that made them, so that extracting a large log's features is done once."""
        lengths = np.array([len(f) for f in self.features], dtype=np.int64)
        rows = [f for f in self.features if len(f)]
        width = rows[0].shape[1] if rows else len(FEATURE_NAMES)
        np.savez_compressed(
            path,
            rows=np.concatenate(rows) if rows else np.zeros((0, width), np.float32),
            lengths=lengths,
            throughputs=self.throughputs,
            task_ids=np.array(self.task_ids, dtype=str),
            signature=np.array(feature_signature()),
        )

    @classmethod
    def load(cls, path: str) -> Dataset:
        """Read a file written by `save`; one clear error when another feature layout made
        it (its programs would be read as the wrong features)."""
        with np.load(path, allow_pickle=False) as f:
            if str(f["signature"]) != feature_signature():
                raise AutoschedError(
                    f"{path} holds features of another feature layout "
                    f"({f['signature']} here {feature_signature()}): extract it again from "
                    "its record logs"
                )
            lengths, rows = f["lengths"], f["rows"]  # each access reads the array again
            ends = np.cumsum(lengths)
            features = [rows[e - n : e] for e, n in zip(ends, lengths, strict=True)]
            return cls(features, f["throughputs"], [str(t) for t in f["task_ids"]])


def feature_signature() -> str:
    """A short hash of the feature layout (the names, in order)."""
    return hashlib.sha1("\n".join(FEATURE_NAMES).encode()).hexdigest()[:12]


def read_dataset(path: str, n_jobs: int = 1) -> Dataset:
    """The programs of a saved dataset (`.npz`, `Dataset.save`) or of a record log (replayed
    and featurised here)."""
    return Dataset.load(path) if path.endswith(".npz") else load_dataset(path, n_jobs)


def load_dataset(path: str, n_jobs: int = 1) -> Dataset:
    """Replay every record of a log and extract its features (records whose steps no longer
    replay, or whose state no longer lowers, are left out)."""
    return records_dataset(load_records(path), n_jobs)


def records_dataset(records: Iterable[Record], n_jobs: int = 1) -> Dataset:
    """Replay (input, result) records and extract their features (records whose steps no
    longer replay, or whose state no longer lowers, are left out)."""
    from autosched.schedule.compute_dag import ComputeDAG

    dags: dict[str, ComputeDAG] = {}
    states, thr, tasks = [], [], []
    for inp, res in records:
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
    kept = [(i, f) for i, f in enumerate(feats) if f is not None]
    keep = [i for i, _ in kept]
    return Dataset(
        [f for _, f in kept],
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
    train: list[int] = []
    test: dict[str, np.ndarray] = {}
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
            "train": sum(data.task_ids[i] == task for i in train),
            "test_correct": len(ok),
            "pairwise_accuracy": costmodel.pairwise_accuracy(pred, held.throughputs),
            "top5_in_top10_recall": costmodel.topk_recall(pred, held.throughputs, 0.05, 0.10),
        }
    return report


def leave_one_out_ranking(
    make_model, data: Dataset, evaluate: Sequence[str], same_workload: Callable[[str], str]
) -> dict[str, dict]:
    """How well a model ranks a workload it has never seen: for each task key of `evaluate`,
    train `make_model()` on the programs of every other workload (every task whose
    `same_workload(key)` differs from this one's: a model task of the same computation under
    another key is left out too), then score this task's correct programs, before any of its
    measurements. Returns {task key: pairwise accuracy, top-5%-in-top-10% recall, counts}."""
    report = {}
    workload_of = {t: same_workload(t) for t in set(data.task_ids)}
    for key in evaluate:
        held = {t for t, w in workload_of.items() if w == workload_of[key]}
        train = data.without_tasks(held)
        test = data.subset(
            [i for i, t in enumerate(data.task_ids) if t == key and data.throughputs[i] > 0]
        )
        model = make_model()
        model.fit(train.features, train.throughputs, task_ids=train.task_ids)
        pred = model.predict(test.features)
        report[key] = {
            "train": len(train),
            "test_correct": len(test),
            "pairwise_accuracy": costmodel.pairwise_accuracy(pred, test.throughputs),
            "top5_in_top10_recall": costmodel.topk_recall(pred, test.throughputs, 0.05, 0.10),
        }
    return report


def train_on_measured(
    model: costmodel.CostModel,
    task: SearchTask,
    features: Sequence[np.ndarray],
    costs: Sequence[float],
) -> None:
    """Train `model` on measured programs of one task: their feature matrices and mean costs
    in seconds (inf for a failure), as throughputs labelled with the task's workload key."""
    if not features:
        return
    flop = task.compute_dag.flop_count
    model.update(
        list(features),
        np.array([throughput(flop, c) for c in costs]),
        task_ids=[task.workload_key] * len(features),
    )


def train_on_log(model: costmodel.CostModel, path: str, n_jobs: int = 1) -> int:
    """Train `model` on every record of a log (resuming a search). Returns the number used."""
    data = load_dataset(path, n_jobs)
    if len(data):
        model.update(data.features, data.throughputs, task_ids=data.task_ids)
    return len(data)


def default_cost_model(seed: int, pretrained: bool = True) -> XGBModel:
    """The search's cost model when the caller gives none: an XGBModel on one thread which, with
    `pretrained`, ranks with the package's pre-trained model (loaded once a process) until it has
    `few_shot_threshold` programs of its own, then with its own trees retrained on the task's
    measurements; without, or when the shipped model does not fit today's feature table, the
    first round is random."""
    return XGBModel(seed=seed, nthread=1, pretrained=shipped_model() if pretrained else None)


@functools.cache
def shipped_model() -> costmodel.CostModel | None:
    """The package's pre-trained model for today's feature table, or None (with one warning)."""
    from costmodel.pretrained import load_pretrained

    return load_pretrained(FEATURE_NAMES)


class _FromFileMixin(costmodel.CostModel):
    """`update_from_file(log)` on a cost model (abstract: mixed into a concrete model)."""

    def update_from_file(self, path: str, n_jobs: int = 1) -> int:
        """Train on every record in a log (the seed's resume). Returns the number used."""
        return train_on_log(self, path, n_jobs)


class XGBModel(_FromFileMixin, costmodel.XGBModel):
    """costmodel.XGBModel plus `update_from_file(log)`."""


class RandomModel(_FromFileMixin, costmodel.RandomModel):
    """costmodel.RandomModel plus `update_from_file(log)` (a no-op learner, for ablations)."""
