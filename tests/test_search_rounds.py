"""What a search round measures: random picks taking the sketches in turn, the neighbours of
the best measured states (local_share), variants of the block shapes after the fastest
(shape_share), at most launch_cap picks per launch shape, at least sketch_floor per sketch, and
the settings a SearchParams refuses."""

from __future__ import annotations

import collections
import dataclasses
import random

import pytest
from test_search import PARAMS, SMALL, make_policy, small_task

import autosched
from autosched.search.mutations import MUTATIONS, structure_key
from autosched.search.policy import (
    SearchParams,
    SketchPolicy,
    block_shape,
    launch_shape,
    spread_over_sketches,
)


def steered_policy(params: SearchParams) -> tuple[SketchPolicy, list]:
    """A policy of the small matmul whose model steers, and the 24 sampled states it measured
    (the first fastest) and fitted."""
    policy = make_policy(small_task(), params, autosched.XGBModel(nthread=1, few_shot_threshold=0))
    measured = policy.sample_fresh(24)
    costs = [1e-6 * (i + 1) for i in range(len(measured))]
    for r, c in zip(measured, costs, strict=True):
        policy.add_measured_records(r, c)
    policy.update_model([policy.workers.context.replay(r) for r in measured], costs)
    assert not policy.model_guesses
    return policy, measured


# ---- sketches take turns in what is drawn at random ------------------------------------------


def test_spread_over_sketches_takes_each_sketch_in_turn():
    sketch_of = {("a", k): 0 for k in range(6)} | {("b", k): 1 for k in range(2)}
    sketch_of[("c", 0)] = 2
    spread = spread_over_sketches(list(sketch_of), sketch_of, random.Random(3))
    assert sorted(spread) == sorted(sketch_of)
    assert sorted(sketch_of[r] for r in spread[:3]) == [0, 1, 2]
    assert sorted(sketch_of[r] for r in spread[3:5]) == [0, 1]
    assert {sketch_of[r] for r in spread[5:]} == {0}


def test_a_round_the_model_cannot_steer_is_drawn_evenly_over_the_sketches():
    """The small dense layer's multi-level tiling has far more distinct states than its
    cross-thread reductions; the first round still measures each sketch as often."""
    policy = make_policy(small_task("dense_bias"), PARAMS)
    assert policy.model_guesses and len(policy.sketches) == 3
    batch = policy.search_one_round(12)
    drawn = collections.Counter(policy.fresh_sketch.values())
    assert max(drawn.values()) > 2 * min(drawn.values())  # what the sampler's dedupe leaves
    picked = collections.Counter(policy.fresh_sketch[s.key()] for s in batch)
    assert sorted(picked.values()) == [4, 4, 4]


def test_the_sketch_index_names_the_sketch_of_fresh_and_mutated_candidates():
    policy = make_policy(small_task("dense_bias"), SMALL)
    fresh = policy.sample_fresh(30)
    assert {policy.sketch_of(r) for r in fresh} == {0, 1, 2}
    assert all(policy.sketch_of(r) == policy.fresh_sketch[r] for r in fresh)
    rng = random.Random(0)
    for r in fresh:
        child = MUTATIONS["tile_size"].apply(policy.mutation_ctx, [r], rng)
        if child is not None:
            assert policy.sketch_of(child) == policy.fresh_sketch[r]
    assert policy.sketch_of(()) == -1


def test_a_sketch_floor_puts_each_sketchs_best_scored_in_front():
    """The model ranks only sketch 0's candidates: with sketch_floor 2, the two best-scored
    candidates of each other sketch go in front of the ranked ones; without it nothing moves."""
    params = dataclasses.replace(SMALL, sketch_floor=2)
    policy = make_policy(small_task("dense_bias"), params)
    fresh = policy.sample_fresh(30)
    sketch = {r: policy.sketch_of(r) for r in fresh}
    ranked = [r for r in fresh if sketch[r] == 0]
    policy.scores = {r: 1.0 if sketch[r] == 0 else -float(i) for i, r in enumerate(fresh)}
    floored = policy.floored(ranked, 6)
    for k in (1, 2):
        best = sorted((r for r in fresh if sketch[r] == k), key=lambda r: -policy.scores[r])
        assert set(best[:2]) <= set(floored[:4])
    assert [sketch[r] for r in floored[:4]].count(0) == 0
    assert floored[4:] == ranked
    policy.picked.update(floored[:4])  # picked ones are not offered again
    assert all(r not in policy.picked for r in policy.floored(ranked, 6)[:4])
    unfloored = make_policy(small_task("dense_bias"), SMALL)
    unfloored.scores = policy.scores
    assert unfloored.floored(ranked, 6) == ranked


def _one_decision_apart(a, b) -> bool:
    if structure_key(a) != structure_key(b):
        return False
    return sum(x != y for x, y in zip(a, b, strict=True)) == 1


def test_a_steered_round_measures_neighbours_of_each_of_the_best_measured_states():
    """With local_share 1/4, a quarter of the batch is one mutation away from the fastest
    measured states, every one of the local_parents parents given some."""
    params = SearchParams(**{**PARAMS.__dict__, "local_share": 0.25, "local_parents": 2})
    policy, measured = steered_policy(params)
    batch = [s.key() for s in policy.search_one_round(16)]
    parents = measured[:2]
    local = [[p for p in parents if _one_decision_apart(r, p)] for r in batch[:4]]
    assert all(local), "the first quarter are neighbours of the best measured"
    assert {p for ps in local for p in ps} == set(parents)
    assert not set(batch) & set(measured) and len(set(batch)) == 16


def test_no_local_share_leaves_the_round_to_the_evolution(monkeypatch):
    policy = make_policy(small_task(), SMALL, autosched.XGBModel(nthread=1, few_shot_threshold=0))
    for i, r in enumerate(policy.sample_fresh(8)):
        policy.add_measured_records(r, 1e-6 * (i + 1))
    monkeypatch.setattr(
        policy, "neighbours_of_best", lambda num: pytest.fail("called") if num else []
    )
    assert len(policy.search_one_round(4)) == 4


def test_block_shape_reads_the_thread_level_of_each_spatial_split():
    records = (
        ("CI", 5),
        ("SP", 3, 0, 1, (1, 1, 1, 1), True),
        ("SP", 3, 5, 512, (1, 2, 1, 2), True),
        ("SP", 3, 10, 7, (4, 7, 1, 1), True),
        ("SP", 3, 20, 512, (16, 4), True),  # a reduction split
        ("SP", 6, 0, 64, (4,), True),  # a fetch's vector split
    )
    assert block_shape(records) == (1, 2, 7)
    assert block_shape(records, n_spatial_levels=3) == (4,)  # a 3-level structure's splits
    assert block_shape((("CI", 5),)) == ()


def test_a_steered_round_measures_variants_of_the_runner_up_block_shapes():
    """With shape_share 1/4, a quarter of the batch is one mutation away from the fastest state
    of each of the shape_parents block shapes after the fastest, with that state's block
    shape; the fastest shape's own best is no parent."""
    params = SearchParams(**{**PARAMS.__dict__, "shape_share": 0.25, "shape_parents": 2})
    policy, measured = steered_policy(params)
    firsts: dict = {}  # block shape -> its fastest measured state (measured is fastest first)
    for r in measured:
        firsts.setdefault(block_shape(r), r)
    assert len(firsts) >= 3, "the small matmul's samples hold several block shapes"
    parents = list(firsts.values())[1:3]
    assert policy.runner_up_shapes(2) == parents
    batch = [s.key() for s in policy.search_one_round(16)]
    variants = [[p for p in parents if _one_decision_apart(r, p)] for r in batch[:4]]
    assert all(variants), "the first quarter are neighbours of the runner-up shapes' bests"
    assert {p for ps in variants for p in ps} == set(parents)
    assert all(
        block_shape(r) == block_shape(ps[0]) for r, ps in zip(batch[:4], variants, strict=True)
    )
    assert not set(batch) & set(measured) and len(set(batch)) == 16


def test_runner_up_variants_need_a_second_block_shape():
    params = SearchParams(**{**PARAMS.__dict__, "shape_share": 0.25})
    policy, measured = steered_policy(params)
    only = block_shape(measured[0])
    for r in measured:
        if block_shape(r) != only:
            policy.measured[r] = float("inf")  # a failed build counts for no shape
    assert policy.runner_up_shapes(8) == [] and policy.runner_up_variants(4) == []
    assert len(policy.search_one_round(8)) == 8


def test_no_shape_share_leaves_the_round_to_the_evolution(monkeypatch):
    policy = make_policy(small_task(), SMALL, autosched.XGBModel(nthread=1, few_shot_threshold=0))
    for i, r in enumerate(policy.sample_fresh(8)):
        policy.add_measured_records(r, 1e-6 * (i + 1))
    monkeypatch.setattr(policy, "neighbours", lambda *a, **k: pytest.fail("called"))
    assert len(policy.search_one_round(4)) == 4


def test_a_launch_cap_spreads_a_steered_round_over_launch_shapes():
    """With launch_cap 1, the model's picks in a round have distinct launch shapes as long as
    the ranked candidates hold enough of them; without the cap the same round repeats shapes."""
    shapes_per_round = {}
    for cap in (0, 1):
        params = SearchParams(**{**PARAMS.__dict__, "launch_cap": cap, "eps_greedy": 0.0})
        policy, _ = steered_policy(params)
        batch = [s.key() for s in policy.search_one_round(12)]
        shapes = [launch_shape(policy.features.get(r)) for r in batch]
        assert all(shapes) and len(batch) == 12
        shapes_per_round[cap] = len(set(shapes))
    assert shapes_per_round[1] == 12
    assert shapes_per_round[0] < 12


def test_capped_moves_the_overflow_of_a_shape_behind_the_rest():
    policy = make_policy(small_task(), SearchParams(**{**SMALL.__dict__, "launch_cap": 2}))
    fresh = policy.sample_fresh(8)
    shape_of = {r: launch_shape(policy.features.get(r)) for r in fresh}
    a = fresh[0]
    others = [r for r in fresh if shape_of[r] != shape_of[a]]
    # three candidates of one shape ranked first: the third goes behind the other shapes
    ranked = [a, a, a, *others]
    assert policy.capped(ranked) == [a, a, *others, a]
    uncapped = dataclasses.replace(SMALL, launch_cap=0)
    assert make_policy(small_task(), uncapped).capped(ranked) == ranked


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"population": 0}, "population must be >= 1"),
        ({"eps_greedy": 1.5}, "eps_greedy must be in"),
        ({"local_share": -0.1}, "local_share must be in"),
        ({"shape_share": 1.5}, "shape_share must be in"),
        ({"shape_parents": 0}, "shape_parents must be >= 1"),
        ({"launch_cap": -1}, "launch_cap must be >= 0"),
        ({"sketch_floor": -1}, "sketch_floor must be >= 0"),
        ({"n_jobs": 0}, "n_jobs must be None or >= 1"),
        ({"mutation_weights": (("tile", 1.0),)}, r"names \['tile'\]; the mutations are"),
        ({"mutation_weights": (("tile_size", 0.0),)}, "positive sum"),
    ],
)
def test_search_params_name_a_bad_setting(setting, message):
    with pytest.raises(ValueError, match=message):
        SearchParams(**setting)
