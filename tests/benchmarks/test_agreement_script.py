"""benchmarks/agreement.py without a GPU: a log's best is rebuilt as the benchmark builds it (the
kernel the runner and the benchmark then time), and bad input is one clear line."""

from __future__ import annotations

import os

import pytest

from benchmarks import agreement

# a GPU run's log kept for the no-GPU tour: a 1000-trial conv2d_bias_relu search
LOG = os.path.join(
    os.path.dirname(__file__), "..", "..", "examples", "logs", "conv2d_bias_relu.json.gz"
)


def test_a_logs_best_is_rebuilt_with_its_task_and_recorded_time():
    from autosched.records import load_best

    task, kernel, recorded = agreement.best_of(LOG)
    inp, res = load_best(LOG)
    assert task.workload_key == inp.workload_key
    assert recorded == res.mean_cost
    assert kernel.launches and "__global__" in kernel.source


def test_a_log_without_a_correct_record_is_named(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.json: no correct record"):
        agreement.best_of(str(empty))


def test_no_logs_and_no_workloads_is_refused(capsys):
    with pytest.raises(SystemExit):
        agreement.main([])
    assert "give --logs or --workloads" in capsys.readouterr().err


def test_a_missing_log_is_one_line(tmp_path, capsys):
    missing = str(tmp_path / "nowhere.json")
    assert agreement.main(["--logs", missing]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere.json" in err, err


def test_an_unknown_workload_is_one_line(capsys):
    assert agreement.main(["--workloads", "no_such_op"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no_such_op" in err, err
