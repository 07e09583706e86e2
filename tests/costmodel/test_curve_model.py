"""`autosched curve` on a log of several tasks: the estimated end-to-end latency (weights from
the scheduler's sidecar or --weights) and the trials per task, beside the GFLOP/s curves."""

from __future__ import annotations

import pytest

import autosched
from autosched.cli.app import main
from autosched.cli.model_curve import end_to_end_curve, resolve_weights, task_order
from autosched.errors import AutoschedError
from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile, load_records
from autosched.search.task_list import write_task_list

TASKS = [autosched.SearchTask("matmul", (16, 16, 8)), autosched.SearchTask("matmul", (8, 8, 8))]
A, B = (t.workload_key for t in TASKS)


def write_model_log(path, sidecar_weights=None) -> list:
    """A: 4 us then 2 us; B: a failure, then 10 us, then 5 us (interleaved)."""
    rows = [(A, 4e-6), (B, None), (A, 2e-6), (B, 10e-6), (B, 5e-6)]
    log = RecordToFile(str(path))
    for key, cost in rows:
        res = MeasureRecordResult((cost,)) if cost else MeasureRecordResult((), 6, "wrong")
        log([MeasureInput(key, ())], [res])
    if sidecar_weights is not None:
        write_task_list(str(path), TASKS, sidecar_weights)
    return list(load_records(str(path)))


def test_end_to_end_starts_when_every_task_has_a_kernel(tmp_path):
    records = write_model_log(tmp_path / "m.json")
    xs, ys = end_to_end_curve(records, {A: 3.0, B: 1.0})
    assert xs == [4, 5]
    assert ys == pytest.approx([3 * 2 + 10, 3 * 2 + 5])


def test_weights_come_from_the_sidecar_then_the_command_line(tmp_path):
    records = write_model_log(tmp_path / "m.json")
    listed = [{"key": A, "name": "conv1", "weight": 3}]
    keys = task_order(records, listed)
    assert keys == [A, B]
    assert resolve_weights(keys, [], []) == {A: 1.0, B: 1.0}
    assert resolve_weights(keys, listed, []) == {A: 3.0, B: 1.0}
    assert resolve_weights(keys, listed, ["conv1=5", "1=2"]) == {A: 5.0, B: 2.0}
    assert resolve_weights(keys, listed, [f"{B}=7"])[B] == 7.0
    with pytest.raises(AutoschedError, match="no task 'conv9'"):
        resolve_weights(keys, listed, ["conv9=1"])
    with pytest.raises(AutoschedError, match="TASK=WEIGHT"):
        resolve_weights(keys, listed, ["conv1"])
    with pytest.raises(AutoschedError, match="not a number"):
        resolve_weights(keys, listed, ["conv1=x"])


def test_curve_draws_the_model_panels(tmp_path, capsys, monkeypatch):
    write_model_log(tmp_path / "m.json", sidecar_weights=[3, 1])
    drawn = {}
    import autosched.cli.model_curve as model_curve

    real = model_curve.end_to_end_curve

    def spy(records, weights):
        drawn["weights"] = weights
        return real(records, weights)

    monkeypatch.setattr(model_curve, "end_to_end_curve", spy)
    out = tmp_path / "m.png"
    assert main(["curve", str(tmp_path / "m.json"), "-o", str(out)]) == 0
    assert out.stat().st_size > 0 and drawn["weights"] == {A: 3.0, B: 1.0}
    assert main(["curve", str(tmp_path / "m.json"), "-o", str(out), "--weights", "0=2"]) == 0
    assert drawn["weights"] == {A: 2.0, B: 1.0}
