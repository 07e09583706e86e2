"""`background.Background` and `first_done`: a call in a thread, waited for later; the first of
several to end."""

from __future__ import annotations

import threading

import pytest

from autosched.search.background import Background, first_done


def test_first_done_returns_the_task_that_ended_not_the_oldest():
    release = threading.Event()
    slow = Background(lambda: release.wait(5.0), "slow")
    fast = Background(lambda: "fast", "fast")
    slow.start()
    fast.start()
    assert first_done([slow, fast]) is fast
    release.set()
    assert slow.result() is True and fast.result() == "fast"
    assert first_done([slow, fast]) is slow  # both ended: the earliest listed


def test_first_done_of_a_task_that_raised_returns_it_to_raise_there():
    def fail():
        raise RuntimeError("boom")

    task = Background(fail)
    task.start()
    assert first_done([task]) is task
    with pytest.raises(RuntimeError, match="boom"):
        task.result()


def test_first_done_needs_a_task():
    with pytest.raises(ValueError, match="at least one"):
        first_done([])
