"""The cost model on real measurements: random states of three suite workloads, measured on the
GPU machine (H100) by benchmarks/collect_dataset.py and committed under tests/data/costmodel/.

Per workload, 20% of the programs are held out; the model trained on the rest ranks the held-out
correct programs: pairwise accuracy >= 0.85 and recall of the true top-5% in the predicted
top-10% >= 0.6, far above the random model (~0.5 / ~0.1). The figures are printed (pytest -n 0 -s).

The programs' feature matrices come from a cache beside the logs (tests/costmodel_cache.py),
recomputed whenever a log or the source of the feature extraction changes.
"""

from __future__ import annotations

import collections
import glob
import gzip
import os

import numpy as np
import pytest

from autosched.errors import AutoschedError
from autosched.features import FEATURE_NAMES
from autosched.records import load_records
from autosched.search.cost_model import (
    Dataset,
    RandomModel,
    XGBModel,
    holdout_ranking,
    load_dataset,
    read_dataset,
)
from costmodel.metrics import pairwise_accuracy
from tests.costmodel_cache import cached_dataset

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "costmodel")
LOGS = sorted(glob.glob(os.path.join(DATA, "*.jsonl.gz")))
PAIRWISE_TARGET = 0.85


@pytest.fixture(scope="module")
def parts() -> dict[str, Dataset]:
    """Each log's programs, from the feature cache (recomputed there when stale)."""
    assert len(LOGS) >= 3, f"expected three record logs in {DATA}"
    return {path: cached_dataset(path) for path in LOGS}


@pytest.fixture(scope="module")
def dataset(parts) -> Dataset:
    return Dataset.joined(list(parts.values()))


def test_fixture_has_1000_measured_programs_per_workload():
    counts = collections.Counter(inp.workload_key for path in LOGS for inp, _ in load_records(path))
    print("\nrecords per workload:", dict(counts))
    assert len(counts) >= 3 and min(counts.values()) >= 1000


def test_cached_features_equal_a_fresh_extraction(parts, tmp_path):
    """The cache holds what load_dataset computes now: the first records of each log, extracted
    here, give the cached programs' features, throughputs and workloads. When lowering or the
    features change, this fails: `python -m tests.costmodel_cache` recomputes the caches."""
    for path, cached in parts.items():
        with gzip.open(path, "rt") as f:
            head = [next(f) for _ in range(24)]
        (tmp_path / "head.jsonl").write_text("".join(head))
        fresh = load_dataset(str(tmp_path / "head.jsonl"))
        assert len(fresh) >= 20, path
        cached = cached.subset(range(len(fresh)))
        assert cached.task_ids == fresh.task_ids
        np.testing.assert_array_equal(cached.throughputs, fresh.throughputs)
        stale = "stale feature cache: run `python -m tests.costmodel_cache` and commit it"
        for a, b in zip(cached.features, fresh.features, strict=True):
            assert a.dtype == b.dtype, stale
            np.testing.assert_array_equal(a, b, err_msg=stale)


def test_xgb_ranks_held_out_programs_and_beats_random(dataset):
    counts = collections.Counter(dataset.task_ids)
    assert len(counts) >= 3 and min(counts.values()) >= 1000, counts  # the programs that lower
    xgb = holdout_ranking(lambda: XGBModel(seed=0), dataset)
    rnd = holdout_ranking(lambda: RandomModel(seed=0), dataset)
    for task in sorted(xgb):
        a, r = xgb[task], rnd[task]
        print(
            f"\n{task}: held-out correct {a['test_correct']}, "
            f"pairwise {a['pairwise_accuracy']:.3f} "
            f"(random {r['pairwise_accuracy']:.3f}), top-5% recall in top-10% "
            f"{a['top5_in_top10_recall']:.2f} (random {r['top5_in_top10_recall']:.2f})"
        )
    for task, a in xgb.items():
        assert a["pairwise_accuracy"] >= PAIRWISE_TARGET, (task, a)
        assert a["top5_in_top10_recall"] >= 0.6, (task, a)
        assert a["pairwise_accuracy"] > rnd[task]["pairwise_accuracy"] + 0.25, (task, a, rnd[task])


def test_collect_dataset_replays_the_recorded_states(tmp_path):
    """benchmarks/collect_dataset.py --replay measures a dataset's states again (e.g. after a
    lowering change): the first `count` states of the log, in the file's order."""
    from benchmarks.collect_dataset import replayed_states

    with gzip.open(os.path.join(DATA, "matmul.jsonl.gz"), "rt") as f:
        head = [next(f) for _ in range(5)]
    (tmp_path / "matmul.jsonl").write_text("".join(head))
    states = replayed_states("matmul", str(tmp_path), 3)
    recorded = [inp.steps for inp, _ in load_records(str(tmp_path / "matmul.jsonl"))][:3]
    assert len(states) == 3
    assert [tuple(tuple(s.to_record()) for s in st.steps) for st in states] == [
        tuple(tuple(s) for s in steps) for steps in recorded
    ]


def test_a_model_fit_on_1000_measured_programs_orders_them(dataset):
    """Fit on 1000 measured programs of one task, the model orders them far better than chance
    (its training fit: how long the fit takes is the benchmarks' business, not a test's)."""
    task = sorted(set(dataset.task_ids))[0]
    part = dataset.subset([i for i, t in enumerate(dataset.task_ids) if t == task][:1000])
    model = XGBModel(seed=0, nthread=1)
    model.fit(part.features, part.throughputs, task_ids=part.task_ids)
    predicted = model.predict(part.features)
    assert len(part) == 1000
    assert pairwise_accuracy(np.asarray(predicted), np.asarray(part.throughputs)) > 0.7


def test_saved_dataset_round_trips_and_drops_tasks(tmp_path):
    rng = np.random.default_rng(0)
    n = len(FEATURE_NAMES)
    data = Dataset(
        [rng.random((3, n), dtype=np.float32), np.zeros((0, n), np.float32), rng.random((1, n))],
        np.array([2.0, 0.0, 1.5]),
        ["a", "b", "a"],
    )
    data.save(str(tmp_path / "d.npz"))
    back = read_dataset(str(tmp_path / "d.npz"))
    assert back.task_ids == data.task_ids and np.array_equal(back.throughputs, data.throughputs)
    assert all(np.array_equal(x, y) for x, y in zip(back.features, data.features, strict=True))
    assert back.without_tasks(["a"]).task_ids == ["b"]
    both = Dataset.joined([data, back.without_tasks(["b"])])
    assert both.task_ids == ["a", "b", "a", "a", "a"] and len(both.throughputs) == 5


def test_saved_dataset_of_another_feature_layout_is_refused_in_one_line(tmp_path):
    path = str(tmp_path / "d.npz")
    Dataset([np.ones((1, 3), np.float32)], np.array([1.0]), ["a"]).save(path)
    with np.load(path) as f:
        arrays = dict(f)
    arrays["signature"] = np.array("0123456789ab")
    np.savez(path, **arrays)
    with pytest.raises(AutoschedError, match="another feature layout"):
        Dataset.load(path)
