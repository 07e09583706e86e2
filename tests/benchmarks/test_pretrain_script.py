"""benchmarks/pretrain.py without a GPU: which files it reads, which records it keeps (one per
state at its median cost, only positive finite costs, at most so many a workload, drawn the
same way every time) and the table it publishes."""

from __future__ import annotations

import json
import math

from autosched.records import MeasureErrorKind, MeasureInput, MeasureRecordResult, RecordToFile
from benchmarks import pretrain
from benchmarks.report import read_results, write_results

K, J = '["matmul", 32, 32, 16]', '["matmul", 16, 16, 16]'  # keys a log is read back with


def write_log(path, rows) -> None:
    """rows: (workload key, step records, cost or None for a failure)."""
    inputs, results = [], []
    for key, steps, cost in rows:
        inputs.append(MeasureInput(key, steps))
        if cost is None:
            results.append(MeasureRecordResult((), int(MeasureErrorKind.RUNTIME_ERROR)))
        else:
            results.append(MeasureRecordResult((cost,)))
    RecordToFile(str(path))(inputs, results)


def test_record_logs_leave_the_result_tables_out(tmp_path):
    (tmp_path / "run").mkdir()
    for name in ("a.json.gz", "run/b.json", "run/results.json", "run/results.json.gz", "c.md"):
        (tmp_path / name).write_text("")
    found = [p.removeprefix(str(tmp_path) + "/") for p in pretrain.record_logs([str(tmp_path)])]
    assert found == ["a.json.gz", "run/b.json"]


def test_record_logs_read_files_named_beside_folders(tmp_path):
    """A log named on the command line (the packed logs of costmodel/data/) is read beside the
    logs found under a folder, each log once."""
    (tmp_path / "run").mkdir()
    for name in ("packed.jsonl.gz", "run/b.json", "c.md"):
        (tmp_path / name).write_text("")
    roots = [str(tmp_path / "packed.jsonl.gz"), str(tmp_path / "run")]
    found = [p.removeprefix(str(tmp_path) + "/") for p in pretrain.record_logs(roots)]
    assert found == ["packed.jsonl.gz", "run/b.json"]
    assert (
        pretrain.record_logs([str(tmp_path), str(tmp_path / "run")]).count(
            str(tmp_path / "run" / "b.json")
        )
        == 1
    )


def test_one_record_per_state_at_its_median_of_positive_finite_costs(tmp_path):
    s1, s2, s3 = (("SP", 0, 1),), (("SP", 0, 2),), (("SP", 0, 4),)
    write_log(tmp_path / "one.json", [(K, s1, 1.0), (K, s1, 3.0), (K, s2, None)])
    write_log(tmp_path / "two.json", [(K, s1, 2.0), (K, s3, 0.0), (J, s1, math.inf)])
    costs = pretrain.measured_states(pretrain.record_logs([str(tmp_path)]))
    assert costs == {K: {s1: [1.0, 3.0, 2.0]}}
    records = pretrain.sampled_records(costs, per_workload=10, seed=0)
    assert [(i.workload_key, i.steps, r.mean_cost) for i, r in records] == [(K, s1, 2.0)]


def test_a_workloads_draw_is_capped_and_repeatable():
    costs = {
        "k": {(("SP", 0, n),): [1.0] for n in range(50)},
        "j": {(("SP", 0, n),): [1.0] for n in range(5)},
    }
    first = pretrain.sampled_records(costs, per_workload=8, seed=0)
    alone = pretrain.sampled_records({"k": costs["k"]}, per_workload=8, seed=0)
    assert sum(i.workload_key == "k" for i, _ in first) == 8
    assert sum(i.workload_key == "j" for i, _ in first) == 5
    assert [i for i, _ in first if i.workload_key == "k"] == [i for i, _ in alone]
    other_seed = pretrain.sampled_records(costs, per_workload=8, seed=1)
    assert [i for i, _ in first] != [i for i, _ in other_seed]


def test_the_published_table_ends_with_the_mean(tmp_path):
    evaluation = {
        key: {
            "train": 100,
            "test_correct": 40,
            "pairwise_accuracy": acc,
            "top5_in_top10_recall": 0.5,
        }
        for key, acc in (('["matmul", 1024]', 0.8), ("dag-0123", 0.9))
    }
    about = {"programs": 140, "workload_keys": 2, "per_workload": 500}
    results = pretrain.results_of(evaluation, about, ["--logs", "x"])
    folder = write_results(results, root=str(tmp_path))
    table = read_results(f"{folder}/results.json").tables[0]
    assert [row[0] for row in table.rows] == ["[matmul,1024]", "dag-0123", "mean"]
    assert abs(table.rows[-1][3] - 0.85) < 1e-12
    assert json.load(open(f"{folder}/results.json"))["runs"][0]["about"] == about
