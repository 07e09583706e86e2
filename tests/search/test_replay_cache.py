"""search/replay_cache.py: a replay from the longest prefix replayed before is the state a
replay from scratch gives, its trie stays within its capacity, and records that do not replay
raise as they do from scratch."""

from __future__ import annotations

import random

import pytest

from autosched.errors import ScheduleError
from autosched.search.mutations import MUTATIONS, MutationContext
from autosched.search.replay_cache import PrefixReplay
from autosched.search.workers import TaskContext
from tests.workloads_for_tests import conv2d_bias_relu_dag, summary_json


@pytest.fixture(scope="module")
def family():
    """Sampled conv2d candidates and tile-size mutations of them: records sharing prefixes
    (a sketch's structure, a parent's steps before the split its child changed)."""
    context = TaskContext(conv2d_bias_relu_dag(co=32, ci=16))
    parents = [s.records for s in context.sample(6, 0)]
    rng = random.Random(0)
    ctx = MutationContext(64, 4, (0, 16, 64), (0, 16, 64))
    children = [MUTATIONS["tile_size"].apply(ctx, [p], rng) for p in parents for _ in range(3)]
    return context.dag, parents + [c for c in children if c is not None]


def test_a_prefix_replay_is_the_replay_from_scratch(family):
    dag, candidates = family
    replays = PrefixReplay(dag.get_init_state())
    for records in candidates + candidates:  # the second time, every prefix is known
        got, want = replays.replay(records), dag.replay_steps(records)
        assert got.key() == want.key() == records
        assert summary_json(got) == summary_json(want)
    assert replays.size < 2 * sum(len(r) for r in candidates)  # prefixes were shared


def test_the_trie_stays_within_its_capacity(family):
    dag, candidates = family
    capacity = max(len(r) for r in candidates) + 5
    replays = PrefixReplay(dag.get_init_state(), capacity=capacity)
    for records in candidates:
        assert summary_json(replays.replay(records)) == summary_json(dag.replay_steps(records))
        assert replays.size <= capacity


def test_records_that_do_not_replay_raise_as_from_scratch(family):
    dag, candidates = family
    replays = PrefixReplay(dag.get_init_state())
    records = candidates[0]
    bad = records + (("CA", 99, 0, 0),)  # a compute_at of a stage the state does not have
    with pytest.raises(ScheduleError) as from_scratch:
        dag.replay_steps(bad)
    with pytest.raises(ScheduleError) as from_prefix:
        replays.replay(bad)
    assert str(from_prefix.value) == str(from_scratch.value)
    assert replays.replay(records).key() == records  # the prefix that replayed is kept
