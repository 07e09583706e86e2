"""A search never hands out two states of one program: different steps that print the same
kernels (an unroll limit above every loop nest, for one) are passed over when picked, the
artifacts built to tell them apart go on to the measurement, and a log's programs count as
handed out."""

from __future__ import annotations

import collections

import pytest

import autosched
from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile, now
from autosched.search.policy import SkipLoggedStates
from autosched.search.workers import KEPT_ARTIFACTS
from tests.search.test_search import PARAMS, make_policy, small_task


@pytest.fixture(scope="module")
def shared():
    """A policy of the small dense layer, its fresh samples and each one's program digest."""
    policy = make_policy(small_task("dense_bias"), PARAMS)
    fresh = policy.sample_fresh(48)
    built = policy.workers.build(fresh, [""] * len(fresh))
    digests = {r: b.program_digest for r, b in zip(fresh, built, strict=True)}
    assert len(set(digests.values())) < len(fresh)  # several states print the same kernels
    return fresh, digests


def test_picks_are_distinct_programs_and_the_rest_is_counted(shared):
    fresh, digests = shared
    policy = make_policy(small_task("dense_bias"), PARAMS)
    picked = policy.distinct_programs(iter(fresh), len(fresh))
    assert len({digests[r] for r in picked}) == len(picked) == len(set(digests.values()))
    assert policy.n_same_program == len(fresh) - len(picked)
    first = {}
    for r in fresh:  # the first state of each program is the one picked
        first.setdefault(digests[r], r)
    assert picked == list(first.values())
    assert policy.picked >= set(fresh)  # the passed-over ones are never handed out either


def test_the_iterator_keeps_what_a_pick_did_not_reach(shared):
    fresh, _ = shared
    policy = make_policy(small_task("dense_bias"), PARAMS)
    candidates = iter(fresh)
    picked = policy.distinct_programs(candidates, 3)
    assert len(picked) == 3
    rest = list(candidates)
    assert picked[-1] == fresh[len(fresh) - len(rest) - 1] and rest[0] not in policy.picked


def test_the_measurement_takes_the_artifacts_the_pick_built(shared):
    fresh, _ = shared
    policy = make_policy(small_task("dense_bias"), PARAMS)
    picked = policy.distinct_programs(iter(fresh), 4)
    calls = collections.Counter()
    real_map = policy.workers.map

    def counting_map(method, chunks):
        calls[method] += sum(len(c[0]) for c in chunks)
        return real_map(method, chunks)

    policy.workers.map = counting_map  # type: ignore[method-assign]
    states = [policy.workers.context.replay(r) for r in picked]
    tags = [s.fingerprint() for s in states]
    artifacts = policy.workers.build(picked, tags)
    assert calls["build"] == 0 and [a.tag for a in artifacts] == tags
    again = policy.workers.build(picked[:1], tags[:1])  # handed out once: built anew
    assert calls["build"] == 1 and again[0].source == artifacts[0].source


def test_kept_artifacts_are_bounded(shared):
    fresh, _ = shared
    policy = make_policy(small_task("dense_bias"), PARAMS)
    built = policy.workers.build(fresh[:1], [""])[0]
    for i in range(KEPT_ARTIFACTS + 10):
        policy.workers.keep((("fake", i),), built)
    assert len(policy.workers._kept) == KEPT_ARTIFACTS


def test_a_logged_program_is_not_handed_out_again(shared, tmp_path):
    fresh, digests = shared
    by_program = collections.defaultdict(list)
    for r in fresh:
        by_program[digests[r]].append(r)
    logged, twin = next(rs for rs in by_program.values() if len(rs) > 1)[:2]
    task = small_task("dense_bias")
    log = str(tmp_path / "log.json")
    result = MeasureRecordResult((1e-5,), 0, "", 0.1, 0.1, now())
    RecordToFile(log)([MeasureInput(task.workload_key, logged)], [result])
    policy = autosched.SketchPolicy(
        task,
        autosched.XGBModel(nthread=1),
        PARAMS,
        init_search_callbacks=[SkipLoggedStates(log)],
        verbose=0,
    )
    assert policy.distinct_programs(iter([twin]), 1) == []
    other = next(r for r in fresh if digests[r] != digests[logged])
    assert policy.distinct_programs(iter([other]), 1) == [other]
