"""search/collector.py: the collector kept to young objects inside the block, and restored."""

import gc

from autosched.search.collector import young_objects_only


def test_freezes_inside_and_unfreezes_after():
    assert gc.get_freeze_count() == 0
    alive = [object() for _ in range(10)]
    with young_objects_only():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    del alive


def test_unfreezes_when_the_block_raises():
    try:
        with young_objects_only():
            raise ValueError("a candidate's crash")
    except ValueError:
        pass
    assert gc.get_freeze_count() == 0


def test_a_callers_freeze_is_left_as_it_was():
    gc.freeze()
    try:
        with young_objects_only():
            pass
        assert gc.get_freeze_count() > 0  # the block did not unfreeze what it did not freeze
    finally:
        gc.unfreeze()


def test_cycles_made_inside_are_collected_inside():
    with young_objects_only():
        cycle: list = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1
