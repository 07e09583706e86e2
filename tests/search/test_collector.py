"""search/collector.py: the collector kept to young objects inside the block, or paused in it,
and restored."""

import gc
import weakref

from autosched.search.collector import collector_paused, young_objects_only


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


def test_a_nested_block_leaves_the_enclosing_freeze_in_place():
    with young_objects_only():
        with young_objects_only():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0  # the inner block did not unfreeze the outer's
    assert gc.get_freeze_count() == 0
    with young_objects_only():  # and a later block freezes again
        assert gc.get_freeze_count() > 0
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


def test_paused_inside_and_enabled_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_when_the_paused_block_raises():
    try:
        with collector_paused():
            raise ValueError("a candidate's crash")
    except ValueError:
        pass
    assert gc.isenabled()


def test_a_callers_disable_is_left_as_it_was():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # the block did not enable what it did not disable
    finally:
        gc.enable()


def test_cycles_made_in_a_paused_block_are_freed_when_it_ends():
    class Node:
        pass

    freed = []
    with collector_paused():
        node = Node()
        node.self = node  # a cycle: only the collector frees it
        weakref.finalize(node, freed.append, True)
        del node
        assert not freed  # not while the collector is paused
    assert freed == [True]
