"""`autosched curve`'s best-so-far series against trials and against time (`--x time`); the
command itself is run in tests/test_cli.py."""

from __future__ import annotations

import pytest

import autosched
from autosched.cli.curve import best_so_far
from autosched.errors import AutoschedError
from autosched.records import MeasureInput, MeasureRecordResult

KEY = autosched.SearchTask("matmul", (32, 32, 16)).workload_key
FLOP = 2 * 32 * 32 * 16


def records(costs_and_times):
    """Records of one matmul task: (seconds, timestamp) each, None seconds for a failure."""
    inp = MeasureInput(KEY, ())
    return [
        (inp, MeasureRecordResult((c,), 0, "", timestamp=t))
        if c is not None
        else (inp, MeasureRecordResult((), 6, "wrong answer", timestamp=t))
        for c, t in costs_and_times
    ]


def test_the_best_so_far_against_trials_and_against_seconds_since_the_first_record():
    log = records([(4e-6, 1000.0), (None, 1001.5), (2e-6, 1003.0), (3e-6, 1010.25)])
    gflops = [FLOP / 4e-6 / 1e9] * 2 + [FLOP / 2e-6 / 1e9] * 2
    xs, ys = best_so_far(log, "trials")[KEY]
    assert xs == [1, 2, 3, 4] and ys == pytest.approx(gflops)
    xs, ys = best_so_far(log, "time")[KEY]
    assert xs == pytest.approx([0.0, 1.5, 3.0, 10.25]) and ys == pytest.approx(gflops)


def test_records_without_timestamps_cannot_be_plotted_against_time():
    log = records([(4e-6, 0.0), (2e-6, 0.0)])
    assert best_so_far(log, "trials")[KEY][0] == [1, 2]
    with pytest.raises(AutoschedError, match="no timestamps"):
        best_so_far(log, "time")
