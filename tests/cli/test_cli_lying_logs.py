"""`autosched show`, `curve` and `resume` on logs that lie: the lying records are skipped with
one warning line, never counted as correct, never the best, never plotted."""

from __future__ import annotations

import math

import pytest

import autosched
from autosched.cli.app import main
from autosched.cli.record_log import read_log
from autosched.records import MeasureInput, MeasureRecordResult, encode
from autosched.sketch import generate_sketches, sample_initial_population

TASK = autosched.SearchTask("matmul", (8, 8, 8))


def steps(seed: int) -> tuple:
    (state,) = sample_initial_population(generate_sketches(TASK.compute_dag), 1, seed)
    return tuple(s.to_record() for s in state.steps)


def line(costs, key: str = TASK.workload_key, seed: int = 0) -> str:
    return encode(MeasureInput(key, steps(seed)), MeasureRecordResult(tuple(costs)))


@pytest.fixture
def lying_log(tmp_path):
    path = tmp_path / "lies.json"
    rows = [
        line((4e-6,)),
        line((-1e-3,)),  # would be "best -1000.00 us"
        line((math.nan,)),
        line((2e-6,), key='["matmul", 8, 8]'),
        line((3e-6,), seed=1),
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_show_counts_and_picks_only_valid_records(lying_log, capsys):
    assert main(["show", str(lying_log)]) == 0
    out, err = capsys.readouterr()
    assert "2 records, 2 correct" in out and "best 3.00 us" in out
    assert "-" not in out.split("best ")[1].split("\n")[0]
    (warning,) = err.splitlines()
    assert warning.startswith(f"autosched: warning: skipped 3 lines of {lying_log}")


def test_curve_reads_only_valid_records(lying_log, tmp_path, capsys):
    assert [r.mean_cost for _, r in read_log(str(lying_log))] == [4e-6, 3e-6]
    capsys.readouterr()
    pytest.importorskip("matplotlib")
    assert main(["curve", str(lying_log), "-o", str(tmp_path / "c.png")]) == 0
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_log_of_lies_only_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "all_lies.json"
    path.write_text(line((-1.0,)) + "\n" + line((0.0,)) + "\n")
    for command in ("show", "curve", "resume"):
        assert main([command, str(path)]) == 2
        (message,) = capsys.readouterr().err.splitlines()
        assert message.startswith(f"autosched: {path} is not a record log: none of its 2 lines")
        assert "cost -1.0 s is not a positive, finite time" in message
