"""The pre-trained cost model (costmodel/pretrained.py): the file the package ships, its
feature-table check, and an XGBModel that ranks with it before its own trees exist."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from autosched.features import FEATURE_NAMES
from costmodel import XGBModel, pairwise_accuracy
from costmodel.pretrained import (
    PRETRAINED_FILE,
    ColumnsByName,
    PretrainedMismatchWarning,
    load_pretrained,
    save_pretrained,
)
from tests.costmodel_cache import cached_dataset

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "costmodel")
NAMES = ("a", "b", "c")


def small_model() -> XGBModel:
    """A model whose score rises with feature 0 (a program's speed here is its first feature)."""
    rng = np.random.default_rng(0)
    features = [rng.uniform(0, 1, (2, len(NAMES))) for _ in range(64)]
    model = XGBModel(seed=0, nthread=1, few_shot_threshold=0, num_boost_round=20)
    model.fit(features, [f[:, 0].max() for f in features])
    return model


def test_shipped_file_is_small_and_ranks_a_fixture_workload():
    """The package's file loads with today's feature table and orders the measured states of a
    fixture log far better than chance."""
    assert os.path.getsize(PRETRAINED_FILE) < 5_000_000
    with warnings.catch_warnings():
        warnings.simplefilter("error", PretrainedMismatchWarning)
        model = load_pretrained(FEATURE_NAMES)
    assert model is not None
    trained = model.model if isinstance(model, ColumnsByName) else model  # an older, narrower table
    assert trained.params.threads == 1
    data = cached_dataset(os.path.join(DATA, "depthwise.jsonl.gz"))
    correct = [i for i in range(len(data)) if data.throughputs[i] > 0][:400]
    part = data.subset(correct)
    accuracy = pairwise_accuracy(model.predict(part.features), part.throughputs)
    assert accuracy > 0.65


def test_round_trip_keeps_the_feature_names(tmp_path):
    path = tmp_path / "model.npz"
    model = small_model()
    save_pretrained(model, NAMES, path, about={"programs": 64})
    loaded = load_pretrained(NAMES, path)
    assert loaded is not None
    assert loaded.extra_meta["feature_names"] == list(NAMES)
    assert loaded.extra_meta["about"] == {"programs": 64}
    features = [np.array([[x, 0.5, 0.5]]) for x in (0.1, 0.9)]
    np.testing.assert_array_equal(loaded.predict(features), model.predict(features))


def test_another_feature_table_falls_back_with_one_warning(tmp_path):
    path = tmp_path / "model.npz"
    save_pretrained(small_model(), NAMES, path)
    with pytest.warns(PretrainedMismatchWarning, match="another feature table") as caught:
        assert load_pretrained(("a", "b", "renamed"), path) is None
    assert len(caught) == 1 and "\n" not in str(caught[0].message)


def test_a_wider_feature_table_reads_the_trained_columns_by_name(tmp_path):
    """Features added (and reordered) since training: the model reads its own columns out of
    today's matrices and predicts what it predicted on the old table."""
    path = tmp_path / "model.npz"
    model = small_model()
    save_pretrained(model, NAMES, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PretrainedMismatchWarning)
        wider = load_pretrained(("new", "c", "a", "b"), path)
    assert wider is not None
    old = [np.array([[x, 0.5, 0.2]]) for x in (0.1, 0.5, 0.9)] + [None]
    new = [None if f is None else np.hstack([np.full((1, 1), 7.0), f[:, [2, 0, 1]]]) for f in old]
    np.testing.assert_array_equal(wider.predict(new), model.predict(old))
    with pytest.raises(TypeError, match="read-only"):
        wider.update(new[:1], [1.0])


def test_a_missing_file_falls_back_with_one_warning(tmp_path):
    with pytest.warns(PretrainedMismatchWarning, match="no pre-trained") as caught:
        assert load_pretrained(NAMES, tmp_path / "absent.npz") is None
    assert len(caught) == 1


def test_an_untrained_model_is_not_saved(tmp_path):
    with pytest.raises(ValueError, match="trained"):
        save_pretrained(XGBModel(), NAMES, tmp_path / "m.npz")


def test_a_new_model_ranks_with_the_pretrained_one_until_its_own_trees():
    """Before few_shot_threshold programs of its own, predict is the pretrained model's (not
    random); from the threshold on, the model's own trees rank."""
    pretrained = small_model()
    model = XGBModel(seed=0, nthread=1, few_shot_threshold=8, pretrained=pretrained)
    probe = [np.array([[x, 0.5, 0.5]]) for x in np.linspace(0, 1, 6)]
    assert model.uses_pretrained and not model.uses_random_fallback
    np.testing.assert_array_equal(model.predict(probe), pretrained.predict(probe))
    # its own measurements say the opposite: the faster program has the smaller feature 0
    own = [np.array([[x, 0.5, 0.5]]) for x in np.linspace(0, 1, 8)]
    model.update(own[:4], [1.0 - f[0, 0] for f in own[:4]])
    assert model.uses_pretrained  # 4 < 8 programs of its own
    model.update(own[4:], [1.0 - f[0, 0] for f in own[4:]])
    assert not model.uses_pretrained and not model.uses_random_fallback
    scores = model.predict(probe)
    assert scores[0] > scores[-1]  # its own trees now


def test_without_pretrained_the_first_round_stays_random():
    model = XGBModel(seed=0, nthread=1)
    assert model.uses_random_fallback and not model.uses_pretrained
    scores = model.predict([np.ones((1, 3)), np.ones((1, 3))])
    assert scores[0] != scores[1]  # uniform random draws, not a model's tie
