"""The contract of `costmodel.CostModel`, parametrised over every model the search can use: the
XGBoost and random models of costmodel/, and autosched's versions of them (which add training on
a record log)."""

from __future__ import annotations

import numpy as np
import pytest

import costmodel
from autosched.search import cost_model as search_models
from costmodel import CostModel

QUICK = {"seed": 0, "nthread": 1, "num_boost_round": 10, "few_shot_threshold": 0}
MODELS = {
    "xgb": lambda: costmodel.XGBModel(**QUICK),
    "random": lambda: costmodel.RandomModel(seed=0),
    "search-xgb": lambda: search_models.XGBModel(**QUICK),
    "search-random": lambda: search_models.RandomModel(seed=0),
}


def programs(n: int, seed: int) -> tuple[list, np.ndarray]:
    """n programs of 2-6 statements of 12 features, with one invalid (None) and one empty, and
    a throughput each (0 for those and for a failure)."""
    rng = np.random.default_rng(seed)
    features: list = [rng.random((int(rng.integers(2, 7)), 12)) for _ in range(n)]
    features[1], features[2] = None, np.zeros((0, 12))
    throughputs = np.array([0.0 if f is None or not len(f) else f[:, 0].sum() for f in features])
    throughputs[3] = 0.0
    return features, throughputs


@pytest.mark.parametrize("make", MODELS.values(), ids=MODELS.keys())
def test_a_cost_model_learns_ranks_and_saves(make, tmp_path):
    model = make()
    assert isinstance(model, CostModel)
    features, throughputs = programs(24, seed=0)

    def check(scores: np.ndarray) -> None:
        assert scores.dtype == np.float64 and scores.shape == (len(features),)
        assert scores[1] == scores[2] == -np.inf  # invalid programs rank last
        assert np.isfinite(np.delete(scores, [1, 2])).all()

    check(model.predict(features))  # before any data
    model.fit(features, throughputs, task_ids=["a"] * 12 + ["b"] * 12)
    more, more_throughputs = programs(12, seed=1)
    model.update(more, more_throughputs)
    assert isinstance(model.uses_random_fallback, bool)
    check(model.predict(features))
    with pytest.raises(ValueError):
        model.update(more, more_throughputs[:-1])  # one throughput per program
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = type(model).load(path)
    assert isinstance(loaded, type(model))
    np.testing.assert_array_equal(loaded.predict(features), model.predict(features))


def test_default_threads_are_a_quarter_of_the_cores(monkeypatch):
    import costmodel.xgb_params as xgb_params

    for cores, want in ((16, 4), (32, 8), (2, 1), (1, 1)):
        monkeypatch.setattr(xgb_params, "available_cores", lambda cores=cores: cores)
        assert xgb_params.XGBParams().threads == want
        assert xgb_params.XGBParams(nthread=3).threads == 3
