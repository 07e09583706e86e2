"""What a search round measures: random picks taking the sketches in turn, at most launch_cap
picks per launch shape, the candidates one round carries into the next, and the settings a
SearchParams refuses."""

from __future__ import annotations

import collections
import dataclasses
import random

import numpy as np
import pytest

import autosched
import costmodel
from autosched.search.candidates import block_shape
from autosched.search.cost_model import shipped_model
from autosched.search.policy import (
    FeatureCache,
    SearchParams,
    SketchPolicy,
    launch_shape,
    spread_over_sketches,
)
from tests.search.test_search import PARAMS, SMALL, make_policy, small_task


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
    assert policy.model_guesses and len(policy.sketches) == 5
    batch = policy.search_one_round(12)
    drawn = collections.Counter(policy.fresh_sketch.values())
    assert max(drawn.values()) > 2 * min(drawn.values())  # what the sampler's dedupe leaves
    picked = collections.Counter(policy.fresh_sketch[s.key()] for s in batch)
    assert sorted(picked.values()) == [2, 2, 2, 3, 3], picked


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


# ---- one round starts where the last one ended -------------------------------------------------


def test_a_round_carries_its_best_scored_candidates_into_the_next():
    """The next round's initial population holds the last evolution's best-scored candidates
    not yet measured, scored again without lowering them again, and fewer fresh samples."""
    params = dataclasses.replace(SMALL, carry_over=0.5, sample_init_min_population=2)
    policy, _ = steered_policy(params)
    policy.search_one_round(4)
    scores = [policy.scores[r] for r in policy.carried]
    assert 0 < len(scores) <= 8 and scores == sorted(scores, reverse=True)
    carried = [r for r in policy.carried if r not in policy.picked]
    n_best = int(params.use_measured_ratio * params.population)
    misses = policy.features.misses
    fresh, init = policy.init_population()
    sampled = policy.features.misses - misses
    assert init[len(init) - len(carried) :] == carried
    assert len(fresh) <= params.population - n_best - len(carried)
    policy.score(init)
    assert policy.features.misses - misses == sampled  # the carried were not lowered again


def test_the_feature_cache_drops_the_least_recently_used_half():
    cache = FeatureCache(4)
    for k in range(4):
        cache.put((k,), f"reason {k}")
    assert cache.get((0,)) == "reason 0" and cache.get((9,)) is None
    cache.put((4,), "reason 4")  # full: (1,) and (2,) were used least lately
    assert list(cache.entries) == [(3,), (0,), (4,)]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"population": 0}, "population must be >= 1"),
        ({"eps_greedy": 1.5}, "eps_greedy must be in"),
        ({"launch_cap": -1}, "launch_cap must be >= 0"),
        ({"carry_over": 1.5}, "carry_over must be in"),
        ({"n_jobs": 0}, "n_jobs must be None or >= 1"),
        ({"worker_niceness": 20}, "worker_niceness must be in \\[0, 19\\]"),
        ({"mutation_weights": (("tile", 1.0),)}, r"names \['tile'\]; the mutations are"),
        ({"mutation_weights": (("tile_size", 0.0),)}, "positive sum"),
    ],
)
def test_search_params_name_a_bad_setting(setting, message):
    with pytest.raises(ValueError, match=message):
        SearchParams(**setting)


# ---- the first round: ranked by the pre-trained model, or random --------------------------------


class FirstFeature(costmodel.CostModel):
    """A stand-in for the pre-trained model: a program's score is its rows' largest first
    feature (a fixed ranking the search's own model never learns)."""

    def fit(self, features, throughputs, task_ids=None):
        raise NotImplementedError

    update = fit

    def predict(self, features):
        return np.array([f[:, 0].max() if f is not None and len(f) else -np.inf for f in features])

    def save(self, path):
        raise NotImplementedError

    @classmethod
    def load(cls, path):
        raise NotImplementedError


def test_the_first_round_is_the_pretrained_models_best():
    params = dataclasses.replace(SMALL, eps_greedy=0.0, launch_cap=0)
    model = autosched.XGBModel(nthread=1, seed=0, pretrained=FirstFeature())
    policy = make_policy(small_task(), params, model)
    assert not policy.model_guesses
    batch = policy.search_one_round(6)
    picked = sorted((policy.scores[s.key()] for s in batch), reverse=True)
    assert len(batch) == 6 and len(policy.scores) > 6
    assert picked == sorted(policy.scores.values(), reverse=True)[:6]


def test_the_account_of_a_round_counts_the_candidates_found_invalid():
    policy = make_policy(small_task(), SMALL)
    fresh = policy.sample_fresh(4)
    unreplayable = (*fresh[0][:-1], ("SP", 99, 0, 4, (2,), True))  # a step on no stage
    outcomes = policy.outcomes([unreplayable, fresh[0], unreplayable])
    assert isinstance(outcomes[0], str) and isinstance(outcomes[1], np.ndarray)
    assert policy._counters()["invalid"] == policy.features.misses == 1


def test_the_default_model_ranks_the_first_round_with_the_shipped_one():
    policy = SketchPolicy(small_task(), params=SMALL, verbose=0)
    assert policy.cost_model.uses_pretrained and not policy.model_guesses
    assert policy.cost_model.pretrained is shipped_model() is not None


def test_without_the_pretrained_model_the_first_round_is_random_fresh_samples():
    policy = SketchPolicy(
        small_task(), params=dataclasses.replace(SMALL, pretrained=False), verbose=0
    )
    assert policy.cost_model.pretrained is None and policy.model_guesses
    batch = policy.search_one_round(6)
    assert {s.key() for s in batch} <= set(policy.fresh_sketch) and not policy.scores


# ---- the model a policy made trains in the background ----------------------------------------


def test_a_policys_own_model_trains_while_the_next_round_samples(monkeypatch):
    """update_model returns while the policy's own model trains; the next round draws its fresh
    samples meanwhile and waits for the training only where it reads the model."""
    import threading

    import autosched.search.policy as policy_module

    policy = SketchPolicy(small_task(), params=SMALL, verbose=0)
    measured = policy.sample_fresh(8)
    states = [policy.workers.context.replay(r) for r in measured]
    release, trained = threading.Event(), []
    train = policy_module.train_on_measured

    def slow_training(model, task, features, costs):
        assert release.wait(timeout=5.0)
        train(model, task, features, costs)
        trained.append(len(features))

    monkeypatch.setattr(policy_module, "train_on_measured", slow_training)
    policy.update_model(states, [1e-6] * len(states))
    assert not trained, "update_model waited for the training"
    assert len(policy.sample_fresh(4)) == 4  # no model needed: drawn while it trains
    threading.Timer(0.05, release.set).start()
    assert policy.cost_model is not None and trained == [len(states)]  # read after it ends


def test_a_given_model_trains_in_the_call(monkeypatch):
    """A model the caller gave (and may share or read) is trained before update_model
    returns."""
    import autosched.search.policy as policy_module

    trained = []
    train = policy_module.train_on_measured

    def recorded(model, task, features, costs):
        train(model, task, features, costs)
        trained.append(len(features))

    monkeypatch.setattr(policy_module, "train_on_measured", recorded)
    policy = make_policy(small_task(), SMALL, autosched.XGBModel(nthread=1))
    measured = policy.sample_fresh(6)
    policy.update_model(
        [policy.workers.context.replay(r) for r in measured], [1e-6] * len(measured)
    )
    assert trained == [len(measured)]
