"""The cost model on real measurements: random states of three suite workloads, measured on the
GPU machine (H100) by benchmarks/collect_dataset.py and committed under tests/data/costmodel/.

Per workload, 20% of the programs are held out; the model trained on the rest ranks the held-out
correct programs. Issue 7's targets: pairwise accuracy >= 0.85 and recall of the true top-5% in
the predicted top-10% >= 0.6, far above the random model. Measured with the default model
(program rows, log2 targets): conv2d+bias+relu 0.895 / 0.89, depthwise 0.866 / 1.00, matmul
0.875 / 0.93 (random: ~0.5 / ~0.1). Matmul has 3000 programs (measured at b704a24, session 5):
with the 1000 of before it reached 0.835 on this split (mean 0.851 over six splits); training
on a third / two thirds / all of the new training part gives a mean over six splits of 0.846 /
0.865 / 0.873 (0.865-0.880 per split). The figures are printed (pytest -s).
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from autosched.search.cost_model import (
    Dataset,
    RandomModel,
    XGBModel,
    holdout_ranking,
    load_dataset,
)

DATA = os.path.join(os.path.dirname(__file__), "data", "costmodel")
LOGS = sorted(glob.glob(os.path.join(DATA, "*.jsonl.gz")))
PAIRWISE_TARGET = 0.85


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    assert len(LOGS) >= 3, f"expected three record logs in {DATA}"
    parts = [load_dataset(path, n_jobs=os.cpu_count() or 1) for path in LOGS]
    return Dataset(
        [f for p in parts for f in p.features],
        np.concatenate([p.throughputs for p in parts]),
        [t for p in parts for t in p.task_ids],
    )


def test_fixture_has_1000_measured_programs_per_workload(dataset):
    counts = {t: dataset.task_ids.count(t) for t in set(dataset.task_ids)}
    print("\nprograms per workload:", counts)
    assert len(counts) >= 3 and min(counts.values()) >= 1000


def test_xgb_ranks_held_out_programs_and_beats_random(dataset):
    xgb = holdout_ranking(lambda: XGBModel(seed=0), dataset)
    rnd = holdout_ranking(lambda: RandomModel(seed=0), dataset)
    for task in sorted(xgb):
        a, r = xgb[task], rnd[task]
        print(
            f"\n{task}: held-out correct {a['test_correct']}, pairwise {a['pairwise_accuracy']:.3f} "
            f"(random {r['pairwise_accuracy']:.3f}), top-5% recall in top-10% "
            f"{a['top5_in_top10_recall']:.2f} (random {r['top5_in_top10_recall']:.2f})"
        )
    for task, a in xgb.items():
        assert a["pairwise_accuracy"] >= PAIRWISE_TARGET, (task, a)
        assert a["top5_in_top10_recall"] >= 0.6, (task, a)
        assert a["pairwise_accuracy"] > rnd[task]["pairwise_accuracy"] + 0.25, (task, a, rnd[task])


def test_collect_dataset_replays_the_recorded_states():
    """benchmarks/collect_dataset.py --replay measures a dataset's states again (e.g. after a
    lowering change): the same states, in the file's order."""
    import sys

    from autosched.records import load_records

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from collect_dataset import replayed_states

    states = replayed_states("matmul", DATA, 3)
    recorded = [inp.steps for inp, _ in load_records(os.path.join(DATA, "matmul.jsonl.gz"))][:3]
    assert len(states) == 3
    assert [tuple(tuple(s.to_record()) for s in st.steps) for st in states] == [
        tuple(tuple(s) for s in steps) for steps in recorded
    ]


def test_training_on_1000_measured_programs_takes_under_2_s_on_one_core(dataset):
    """Issue 7: training on 1000 records takes <= 2 s on one core (CPU time of this process:
    neighbours on a shared machine stretch wall time, not this). ~1.0 s on the 2-core dev machine."""
    import time

    task = sorted(set(dataset.task_ids))[0]
    part = dataset.subset([i for i, t in enumerate(dataset.task_ids) if t == task][:1000])
    model = XGBModel(seed=0, nthread=1)
    start = time.process_time()
    model.fit(part.features, part.throughputs, task_ids=part.task_ids)
    seconds = time.process_time() - start
    print(f"\nXGBModel.fit on 1000 measured {task} programs, 1 thread: {seconds:.2f} s CPU")
    assert len(part) == 1000 and seconds <= 2.0
