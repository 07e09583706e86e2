"""Records: JSON lines round-trip; torn and garbage lines are skipped, one warning counts them."""

from __future__ import annotations

import warnings

import pytest

import autosched
from autosched.errors import RecordError
from autosched.records import (
    MeasureInput,
    MeasureRecordResult,
    RecordToFile,
    load_best,
    load_records,
)
from tests.workloads_for_tests import SEED_002_TILES, SEED_002_VECTORS, seed_conv_state


def seed_task_and_state():
    task = autosched.SearchTask("conv2d_bias_relu", (1, 7, 7, 512, 512, 3, 3, 1, 1))
    return task, seed_conv_state(task.compute_dag, SEED_002_TILES, SEED_002_VECTORS)


def test_round_trip_and_load_best(tmp_path):
    task, state = seed_task_and_state()
    log = tmp_path / "log.json"
    inp = MeasureInput(task.workload_key, tuple(s.to_record() for s in state.steps))
    cb = RecordToFile(str(log))
    cb(
        [inp, inp],
        [
            MeasureRecordResult((2e-4, 2.2e-4), 0, "", 1.0, 0.5, 1.0),
            MeasureRecordResult((1e-4,), 0, "", 1.0, 0.5, 2.0),
        ],
    )
    cb([inp], [MeasureRecordResult((), 6, "wrong answer", 1.0, 0.5, 3.0)])
    recs = list(load_records(str(log)))
    assert len(recs) == 3 and recs[0][0] == inp and recs[2][1].error_kind == 6
    best_inp, best_res = load_best(str(log), task.workload_key)
    assert best_res.mean_cost == pytest.approx(1e-4)
    assert best_inp.state == state  # rebuilt from the registered workload
    assert task.apply_best(str(log)) == state


def test_a_stopped_early_result_round_trips_and_older_records_read_as_timed_in_full():
    from autosched.records import decode, encode

    task, state = seed_task_and_state()
    inp = MeasureInput(task.workload_key, tuple(s.to_record() for s in state.steps))
    stopped = MeasureRecordResult((3e-4,), 0, "", 1.0, 0.5, 1.0, stopped_early=True)
    full = MeasureRecordResult((1e-4, 1e-4), 0, "", 1.0, 0.5, 2.0)
    assert decode(encode(inp, stopped))[1] == stopped
    line = encode(inp, full)
    assert "stopped_early" not in line  # a record timed in full reads as older ones did
    assert decode(line)[1] == full and not decode(line)[1].stopped_early


def test_torn_and_garbage_lines_load_with_one_warning_that_counts_them(tmp_path):
    task, state = seed_task_and_state()
    log = tmp_path / "log.json"
    inp = MeasureInput(task.workload_key, tuple(s.to_record() for s in state.steps))
    RecordToFile(str(log))([inp], [MeasureRecordResult((1e-4,), 0, "", 0, 0, 0)])
    good = log.read_text()
    log.write_text(good + "this is not json\n" + good + good[: len(good) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = list(load_records(str(log)))
    assert len(recs) == 2
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1
    assert msgs[0].startswith("skipped 2 lines of") and "first: line 2: not JSON" in msgs[0]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(RecordError, match="does not exist"):
        list(load_records(str(tmp_path / "nope.json")))


def test_appending_after_a_torn_line_keeps_the_new_record(tmp_path):
    """A crash mid-write leaves a line without its newline; the next append must not glue its
    record onto it (the torn line is skipped with a warning, the new one loads)."""
    import warnings

    from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile, load_records

    path = tmp_path / "log.json"
    path.write_text('{"v": 1, "task": {"workload_key": "[\\"matmul\\"')
    RecordToFile(str(path))(
        [MeasureInput('["matmul", 2, 2, 2]', (("CI", 0),))], [MeasureRecordResult((1e-6,))]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(load_records(str(path)))
    assert len(got) == 1 and got[0][1].costs == (1e-6,)
    assert len(caught) == 1 and "(line 1:" in str(caught[0].message)


def test_batches_appended_from_several_threads_are_logged_whole(tmp_path):
    """The tasks of a model tuned at once (and a pipelined loop's two batches) append to one
    log from several threads: every record comes back, none torn."""
    import threading

    task, state = seed_task_and_state()
    log = tmp_path / "log.json"
    inp = MeasureInput(task.workload_key, tuple(s.to_record() for s in state.steps))
    cb = RecordToFile(str(log))

    def append(k: int) -> None:
        for i in range(20):
            cb([inp] * 8, [MeasureRecordResult((1e-6 * (k + 1),), 0, "", 0, 0, i)] * 8)

    threads = [threading.Thread(target=append, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn or garbled line would warn
        recs = list(load_records(str(log)))
    assert len(recs) == 4 * 20 * 8
