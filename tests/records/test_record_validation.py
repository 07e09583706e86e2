"""Records that lie are skipped when read: costs that are not positive finite times, workload
keys that name no DAG (unknown, the wrong number of arguments, not a key), steps that do not
replay. One warning counts them; errored measurements stay (nothing is lost from a log)."""

from __future__ import annotations

import json
import math
import warnings

import pytest

import autosched
from autosched.errors import RecordError
from autosched.records import (
    MalformedRecordWarning,
    MeasureInput,
    MeasureRecordResult,
    RecordToFile,
    decode,
    encode,
    load_best,
    load_records,
)
from autosched.sketch import generate_sketches, sample_initial_population

TASK = autosched.SearchTask("matmul", (8, 8, 8))
KEY = TASK.workload_key


def sampled_steps(seed: int = 0) -> tuple:
    (state,) = sample_initial_population(generate_sketches(TASK.compute_dag), 1, seed)
    return tuple(s.to_record() for s in state.steps)


STEPS = sampled_steps()
NOT_REPLAYING = (("SP", 9, 0, 8, (2,), True),)  # stage 9 does not exist


def line(key: str = KEY, costs=(1e-6,), error_kind: int = 0, steps=STEPS) -> str:
    return encode(MeasureInput(key, steps), MeasureRecordResult(tuple(costs), error_kind))


def read(path, **kwargs) -> tuple[list, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = list(load_records(str(path), **kwargs))
    return records, [str(w.message) for w in caught if w.category is MalformedRecordWarning]


@pytest.mark.parametrize(
    "cost, words",
    [(-1e-3, "cost -0.001 s"), (0.0, "cost 0.0 s"), (math.nan, "nan"), (math.inf, "inf")],
)
def test_a_cost_that_is_no_positive_finite_time_is_refused(cost, words):
    with pytest.raises(RecordError, match="is not a positive, finite time") as err:
        decode(line(costs=(1e-6, cost)))
    assert words in str(err.value)


def test_a_measurement_without_error_needs_costs_and_a_known_error_kind():
    with pytest.raises(RecordError, match="without costs"):
        decode(line(costs=()))
    record = json.loads(line(costs=(), error_kind=6))
    record["result"]["error_kind"] = 42
    with pytest.raises(RecordError, match="unknown error kind 42"):
        decode(json.dumps(record))
    inp, res = decode(line(costs=(), error_kind=6))  # a wrong answer has no cost: kept
    assert not res.ok and res.error_kind == 6


def test_lying_lines_are_skipped_with_one_warning_that_counts_them(tmp_path):
    log = tmp_path / "log.json"
    lines = [
        line(costs=(2e-6,)),
        line(costs=(-1e-3,)),
        line(costs=(math.nan,)),
        line(costs=(), error_kind=6),
        line(key='["no_such_workload", 1]'),
        line(key='["matmul", 8, 8]'),  # matmul takes three sizes
        line(key="not a key"),
        line(costs=(0.0,)),
    ]
    log.write_text("\n".join(lines) + "\n")
    records, messages = read(log)
    assert [r.error_kind for _, r in records] == [0, 6]
    assert len(messages) == 1
    assert messages[0].startswith(f"skipped 6 lines of {log} that are not valid records")
    assert "first: line 2: cost -0.001 s" in messages[0]
    skipped = []
    list(load_records(str(log), on_skip=lambda n, why: skipped.append((n, why))))
    whys = dict(skipped)
    assert "no_such_workload" in whys[5] and "names no DAG" in whys[5]
    assert "TypeError" in whys[6] and "argument" in whys[6]
    assert "malformed workload key" in whys[7]
    assert log.read_text() == "\n".join(lines) + "\n"  # reading never rewrites the log


def test_steps_that_do_not_replay_are_skipped_when_replay_is_asked(tmp_path):
    log = tmp_path / "log.json"
    log.write_text(line() + "\n" + line(steps=NOT_REPLAYING) + "\n")
    records, messages = read(log)
    assert len(records) == 2 and messages == []  # replaying is a choice: a millisecond each
    records, messages = read(log, replay=True)
    assert len(records) == 1
    assert len(messages) == 1 and "line 2: its steps do not replay" in messages[0]


def test_load_best_passes_over_a_fastest_record_that_lies(tmp_path):
    log = tmp_path / "log.json"
    rows = [
        line(costs=(3e-6,)),
        line(costs=(-1e-3,)),  # negative: never the best
        line(costs=(1e-6,), steps=NOT_REPLAYING),  # fastest, but not a state of the task
        line(costs=(2e-6,), steps=sampled_steps(1)),
    ]
    log.write_text("\n".join(rows) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inp, res = load_best(str(log), KEY)
        assert TASK.apply_best(str(log)) == inp.state
    assert res.mean_cost == pytest.approx(2e-6)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and messages[0].startswith("skipped 2 lines")


def test_a_written_log_reads_back_without_warnings(tmp_path):
    log = tmp_path / "log.json"
    inp = MeasureInput(KEY, STEPS, dag=TASK.compute_dag.serialized())
    RecordToFile(str(log))([inp, inp], [MeasureRecordResult((1e-6,)), MeasureRecordResult((), 2)])
    records, messages = read(log, replay=True)
    assert len(records) == 2 and messages == []
    assert json.loads(log.read_text().splitlines()[0])["task"]["dag"]
