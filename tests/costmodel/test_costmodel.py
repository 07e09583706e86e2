"""Tests of costmodel's learners: XGBModel (program rows by default, or the pack-sum) and
RandomModel, on synthetic programs (real measurements: test_costmodel_dataset.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costmodel import (
    RandomModel,
    XGBModel,
    XGBParams,
    pack_features,
    pairwise_accuracy,
    topk_recall,
)
from costmodel.base import read_model_file, write_model_file
from costmodel.program_rows import reduce_statements
from costmodel.ranking import RANK_GRADES, relevance_grades

N_FEATURES = 164

# Ansor's model: one row per statement, the pack-sum of them fitted to the normalised throughput.
PACK_SUM = {"program_rows": "statements", "label": "linear"}


def xgb_model(**overrides) -> XGBModel:
    """An XGBModel on one thread: the default (every core) crawls when CI's cores are shared."""
    return XGBModel(**{"seed": 0, "nthread": 1, **overrides})


def quick_model(**overrides) -> XGBModel:
    """`xgb_model` with 20 boosting rounds instead of 300, for the tests of what a model keeps,
    saves and predicts rather than how well it ranks (a round costs the same on small data)."""
    return xgb_model(**{"num_boost_round": 20, **overrides})


def synthetic_programs(
    n_programs: int, seed: int, min_rows: int = 5, max_rows: int = 30, fail_rate: float = 0.05
) -> tuple[list[np.ndarray], np.ndarray]:
    """Programs of 5-30 statements whose throughput is a sum of nonlinear per-statement terms.

    Only 7 of the 164 features matter; the rest are noise, 70% of them zero (features that do not
    apply to a statement). Throughput gets 5% log-normal noise; ``fail_rate`` of programs fail (0).
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_rows, max_rows + 1, n_programs)
    x = rng.random((int(lengths.sum()), N_FEATURES), dtype=np.float32)
    x[:, 20:] *= rng.random((len(x), N_FEATURES - 20)) < 0.3
    per_statement = (
        3.0 * np.maximum(x[:, 0] - 0.3, 0.0) * x[:, 1]
        + np.sin(3.0 * x[:, 2]) ** 2
        + 2.0 * (x[:, 3] > 0.7) * x[:, 4]
        + 0.5 * x[:, 5] * x[:, 6]
    )
    program = np.repeat(np.arange(n_programs), lengths)
    throughput = np.bincount(program, weights=per_statement) * np.exp(
        rng.normal(0, 0.05, n_programs)
    )
    throughput[rng.random(n_programs) < fail_rate] = 0.0
    return np.split(x, np.cumsum(lengths)[:-1]), throughput


def config_programs(n_programs: int, seed: int, fail_rate: float = 0.05):
    """Programs whose throughput is a nonlinear function of a configuration all statements share.

    Like a GPU kernel's launch and tile configuration: every statement carries a fraction of the
    7 configuration values (the first statement, like a kernel's main statement, all of them), the
    rest of its 164 features is noise as in ``synthetic_programs``. The per-program column max
    recovers the configuration; a per-statement sum does not.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 31, n_programs)
    config = rng.random((n_programs, 7))
    program = np.repeat(np.arange(n_programs), lengths)
    x = rng.random((int(lengths.sum()), N_FEATURES), dtype=np.float32)
    x[:, 20:] *= rng.random((len(x), N_FEATURES - 20)) < 0.3
    share = rng.random(len(x))
    share[np.cumsum(lengths) - lengths] = 1.0
    x[:, :7] = config[program] * share[:, None]
    c = config.T
    throughput = (
        3.0 * np.maximum(c[0] - 0.3, 0.0) * c[1]
        + np.sin(3.0 * c[2]) ** 2
        + 2.0 * (c[3] > 0.7) * c[4]
        + 0.5 * c[5] * c[6]
        + 0.05
    ) * np.exp(rng.normal(0, 0.05, n_programs))
    throughput[rng.random(n_programs) < fail_rate] = 0.0
    return np.split(x, np.cumsum(lengths)[:-1]), throughput


def split_data(features, throughputs, n_train: int = 960):
    return features[:n_train], throughputs[:n_train], features[n_train:], throughputs[n_train:]


@pytest.fixture(scope="module")
def benchmark_data():
    return split_data(*synthetic_programs(1200, seed=0))


@pytest.fixture(scope="module")
def trained(benchmark_data):
    train_x, train_y, _, _ = benchmark_data
    model = quick_model()
    model.fit(train_x, train_y)
    return model


@pytest.fixture(scope="module")
def pack_sum_trained(benchmark_data):
    """A pack-sum model fitted on the first 300 training programs (the tests only read it)."""
    train_x, train_y, _, _ = benchmark_data
    model = quick_model(**PACK_SUM, few_shot_threshold=0)
    model.fit(train_x[:300], train_y[:300])
    return model


@pytest.mark.parametrize(
    ("overrides", "make_data"),
    [
        ({}, config_programs),
        # the modes the search does not use by default run with -m slow
        pytest.param({"objective": "pairwise"}, config_programs, marks=pytest.mark.slow),
        # 120 boosting rounds rank these programs about as well as 300, in 40% of the time
        pytest.param(
            {**PACK_SUM, "num_boost_round": 120}, synthetic_programs, marks=pytest.mark.slow
        ),
    ],
    ids=["default-on-shared-config", "pairwise-on-shared-config", "pack-sum-on-additive"],
)
def test_ranks_held_out_programs(overrides, make_data):
    """Each mode on the data it is built for: the default (column max per program) where a
    configuration shared by the statements decides, the pack-sum where statements add up."""
    train_x, train_y, test_x, test_y = split_data(*make_data(1200, seed=0))
    model = xgb_model(**overrides)
    model.fit(train_x, train_y)
    scores = model.predict(test_x)
    accuracy = pairwise_accuracy(scores, test_y)
    recall = topk_recall(scores, test_y)
    print(
        f"\nXGBModel {overrides or 'default'} held-out: pairwise accuracy {accuracy:.3f}, "
        f"top-k recall {recall:.3f}, {model.last_fit}"
    )
    assert accuracy >= 0.85
    assert recall >= 0.6


def test_pairwise_fits_the_order_of_the_correct_programs_only():
    """The ranking objective trains on the correct programs (failed ones have no grade to order),
    reports no regression error, and saves and loads like the regression."""
    features, throughputs = config_programs(300, seed=1)
    throughputs[::10] = 0.0
    model = quick_model(objective="pairwise")
    model.fit(features, throughputs)
    assert model.last_fit.n_train_rows == int(np.count_nonzero(throughputs))
    assert np.isnan(model.last_fit.valid_rmse)


def test_relevance_grades_give_the_best_program_the_top_grade():
    normalised = np.array([0.0, 0.03, 0.5, 0.99, 1.0, 1.2])
    assert (
        relevance_grades(normalised).tolist()
        == [0, 0, RANK_GRADES // 2, RANK_GRADES - 1] + [RANK_GRADES] * 2
    )


def test_pairwise_refuses_settings_it_cannot_train_with():
    with pytest.raises(ValueError, match="program rows"):
        XGBParams(objective="pairwise", **PACK_SUM)
    with pytest.raises(ValueError, match="early stopping"):
        XGBParams(objective="pairwise", early_stopping_rounds=10)
    with pytest.raises(ValueError, match="objective must be one of"):
        XGBParams(objective="lambdamart")


def test_random_model_ranks_at_chance(benchmark_data):
    train_x, train_y, test_x, test_y = benchmark_data
    model = RandomModel(seed=0)
    model.fit(train_x, train_y)
    scores = model.predict(test_x)
    accuracy = pairwise_accuracy(scores, test_y)
    recall = topk_recall(scores, test_y)
    print(f"\nRandomModel held-out: pairwise accuracy {accuracy:.3f}, top-k recall {recall:.3f}")
    assert 0.4 <= accuracy <= 0.6
    assert recall <= 0.4


def test_fit_1000_programs_one_core():
    """The default configuration fits 1000 programs of 20 statements on one thread and orders
    them (how long that takes is a benchmark's question, not a test's)."""
    rng = np.random.default_rng(1)
    features = [rng.random((20, N_FEATURES), dtype=np.float32) for _ in range(1000)]
    throughputs = np.array([np.sin(3 * f[:, 0]).sum() + f[:, 1].sum() for f in features])
    model = xgb_model()
    model.fit(features, throughputs)
    assert model.last_fit.n_rounds > 0
    assert pairwise_accuracy(model.predict(features), throughputs) > 0.8


def test_pack_hessian_converges_where_diagonal_diverges():
    # 30 statements a program at eta 0.2: TVM's diagonal hessian overshoots (0.2 * 30 > 2).
    features, throughputs = synthetic_programs(300, seed=5, min_rows=30, max_rows=30)
    common = {
        **PACK_SUM,
        "seed": 0,
        "few_shot_threshold": 0,
        "early_stopping_rounds": 0,
        "num_boost_round": 20,
        "eta": 0.2,
    }  # no hold-out: the metric is on the training set
    rmse = {}
    for hessian in ("pack", "diagonal"):
        model = xgb_model(hessian=hessian, **common)
        model.fit(features, throughputs)
        rmse[hessian] = model.last_fit.valid_rmse
    assert rmse["pack"] < 0.2
    assert rmse["diagonal"] > 1.0  # diverged: this is why "pack" is the default


def test_pack_hessian_keeps_the_learning_rate():
    """The first round's step is proportional to eta (the split search does not see eta).

    A former "pack" hessian, weight * max(1, eta * n_statements), divided eta out again: every
    round took a full Newton step, the trees fitted the training set within a few rounds and
    stopped splitting, and the learning rate changed nothing.
    """
    features, throughputs = synthetic_programs(200, seed=13)
    scores = {}
    for eta in (0.05, 0.1):
        model = xgb_model(**PACK_SUM, eta=eta, num_boost_round=1, few_shot_threshold=0)
        model.fit(features, throughputs)
        scores[eta] = model.predict(features)  # the start is 0 for the pack-sum
    np.testing.assert_allclose(scores[0.1], 2 * scores[0.05], rtol=1e-5, atol=1e-7)


def test_default_scores_the_reduced_program_rows(trained, benchmark_data):
    _, _, test_x, _ = benchmark_data
    assert trained.params.program_rows == "max" and trained.last_fit.n_train_rows == 960
    packed = pack_features(test_x)
    rows = reduce_statements(packed.rows, packed.lengths, ("max",))
    direct = trained._booster.inplace_predict(rows, predict_type="margin")
    np.testing.assert_array_equal(trained.predict(test_x), direct.astype(np.float64))
    with pytest.raises(RuntimeError, match="program_rows='statements'"):
        trained.predict_statements(test_x[0])


def test_pack_sum_scores_are_sums_of_statement_scores(benchmark_data, pack_sum_trained):
    train_x, _, test_x, _ = benchmark_data
    model = pack_sum_trained
    assert model.last_fit.n_train_rows == sum(len(f) for f in train_x[:300])
    per_statement = model.predict_statements(test_x[0])
    assert len(per_statement) == len(test_x[0])
    assert model.predict(test_x[:1])[0] == pytest.approx(per_statement.sum(), rel=1e-6)


def test_predict_invalid_programs_get_minus_inf(trained):
    good = np.ones((3, N_FEATURES), np.float32)
    scores = trained.predict([good, None, np.zeros((0, N_FEATURES)), np.zeros(0), good])
    assert np.isneginf(scores[1:4]).all()
    assert np.isfinite(scores[[0, 4]]).all() and scores[0] == scores[4]
    fallback = xgb_model().predict([None, good])
    assert np.isneginf(fallback[0]) and 0 <= fallback[1] < 1


def test_non_finite_features_are_read_as_zero(trained):
    rng = np.random.default_rng(2)
    clean = rng.random((6, N_FEATURES)).astype(np.float32)
    dirty = clean.copy()
    dirty[0, 3], dirty[2, 50], dirty[5, 100] = np.nan, np.inf, -np.inf
    zeroed = clean.copy()
    zeroed[0, 3] = zeroed[2, 50] = zeroed[5, 100] = 0.0
    assert trained.predict([dirty])[0] == trained.predict([zeroed])[0]
    # A float64 value too large for float32 becomes inf on the cast, then 0.
    huge = zeroed.astype(np.float64)
    huge[1, 7] = 1e300
    zeroed[1, 7] = 0.0
    assert trained.predict([huge])[0] == trained.predict([zeroed])[0]


def test_save_load_round_trips_predictions(tmp_path, benchmark_data, trained):
    _, _, test_x, _ = benchmark_data
    path = tmp_path / "model.npz"
    trained.save(path)
    loaded = XGBModel.load(path)
    assert np.array_equal(loaded.predict(test_x), trained.predict(test_x))
    assert loaded.params == trained.params and loaded.n_programs == trained.n_programs
    assert loaded.last_fit == trained.last_fit

    slim_path = tmp_path / "slim"  # no suffix: the file is written at exactly this path
    trained.save(slim_path, include_data=False)
    assert slim_path.exists() and slim_path.stat().st_size < path.stat().st_size
    slim = XGBModel.load(slim_path)
    assert np.array_equal(slim.predict(test_x), trained.predict(test_x))
    assert slim.n_programs == trained.n_programs


def test_save_load_round_trips_pack_sum_predictions(tmp_path, benchmark_data, pack_sum_trained):
    _, _, test_x, _ = benchmark_data
    model = pack_sum_trained
    model.save(tmp_path / "m.npz")
    loaded = XGBModel.load(tmp_path / "m.npz")
    assert loaded.params == model.params
    assert np.array_equal(loaded.predict(test_x), model.predict(test_x))


def test_version_1_files_load_as_pack_sum_models(tmp_path, benchmark_data, pack_sum_trained):
    """Files from before program_rows and label existed hold pack-sum models on linear targets."""
    _, _, test_x, _ = benchmark_data
    model = pack_sum_trained
    model.save(tmp_path / "m.npz")
    meta, arrays = read_model_file(tmp_path / "m.npz", "xgb")
    for key in ("format", "version"):
        del meta[key]
    for key in ("program_rows", "label"):
        del meta["params"][key]
    write_model_file(tmp_path / "v1.npz", meta, arrays)
    with np.load(tmp_path / "v1.npz") as npz:  # rewrite the header's version as 1
        contents = {name: npz[name] for name in npz.files}
    header = json.loads(str(contents["meta"]))
    contents["meta"] = np.array(json.dumps({**header, "version": 1}))
    np.savez(tmp_path / "v1.npz", **contents)
    loaded = XGBModel.load(tmp_path / "v1.npz")
    assert loaded.params == model.params
    assert np.array_equal(loaded.predict(test_x), model.predict(test_x))


def test_save_load_round_trips_random_fallback(tmp_path):
    features, throughputs = synthetic_programs(20, seed=3)
    model = quick_model(seed=7)
    model.fit(features, throughputs)
    assert model.uses_random_fallback
    model.predict(features)  # advance the random state before saving
    model.save(tmp_path / "m.npz")
    loaded = XGBModel.load(tmp_path / "m.npz")
    assert np.array_equal(loaded.predict(features), model.predict(features))


def test_update_grows_the_data_and_retrains():
    features, throughputs = synthetic_programs(260, seed=4)
    model = quick_model()
    model.fit(features[:60], throughputs[:60])
    assert model.n_programs == 60 and model.uses_random_fallback
    model.update(features[60:160], throughputs[60:160])
    assert model.n_programs == 160 and not model.uses_random_fallback
    assert model.last_fit.n_programs == 160
    model.update([], [])  # nothing new: no retraining, nothing changes
    assert model.n_programs == 160
    model.fit(features[160:], throughputs[160:])  # fit forgets what came before
    assert model.n_programs == 100


def test_update_after_load_keeps_the_saved_data(tmp_path):
    features, throughputs = synthetic_programs(150, seed=6)
    model = quick_model()
    model.fit(features[:100], throughputs[:100])
    model.save(tmp_path / "m.npz")
    loaded = XGBModel.load(tmp_path / "m.npz")
    loaded.update(features[100:], throughputs[100:])
    model.update(features[100:], throughputs[100:])
    assert loaded.n_programs == model.n_programs == 150
    assert np.array_equal(loaded.predict(features), model.predict(features))


def test_retrain_min_growth_skips_small_updates():
    features, throughputs = synthetic_programs(130, seed=8)
    model = quick_model(retrain_min_growth=0.2, few_shot_threshold=0)
    model.fit(features[:100], throughputs[:100])
    first = model.last_fit
    model.update(features[100:110], throughputs[100:110])  # +10%: kept, not retrained
    assert model.n_programs == 110 and model.last_fit is first
    model.update(features[110:], throughputs[110:])  # +30% since the last training run
    assert model.last_fit is not first and model.last_fit.n_programs == 130


def test_a_snapshot_retrains_apart_and_its_trees_are_adopted():
    features, throughputs = synthetic_programs(130, seed=8)
    model = quick_model(few_shot_threshold=0)
    model.fit(features[:100], throughputs[:100])
    before = model.predict(features)
    assert model.add(features[100:], throughputs[100:]) == 30
    copy = model.snapshot()
    copy.retrain()
    assert copy.last_fit.n_programs == 130 and model.last_fit.n_programs == 100
    assert np.array_equal(model.predict(features), before)  # untouched until it adopts
    model.adopt(copy)
    updated = quick_model(few_shot_threshold=0)
    updated.fit(features[:100], throughputs[:100])
    updated.update(features[100:], throughputs[100:])  # update = add + retrain
    assert np.array_equal(model.predict(features), updated.predict(features))


def test_few_shot_fallback_is_random_and_seeded():
    features, throughputs = synthetic_programs(120, seed=9)
    a, b, c = quick_model(seed=1), quick_model(seed=1), quick_model(seed=2)
    for model in (a, b, c):
        model.fit(features[:50], throughputs[:50])
        assert model.is_trained and model.uses_random_fallback
    scores_a = a.predict(features)
    assert np.array_equal(scores_a, b.predict(features))
    assert not np.array_equal(scores_a, c.predict(features))
    assert ((scores_a >= 0) & (scores_a < 1)).all()
    assert not np.array_equal(scores_a, a.predict(features))  # fresh draws on every call

    # The threshold counts every program given, and 0 disables the fallback.
    a.update(features[50:], throughputs[50:])
    assert not a.uses_random_fallback
    assert np.array_equal(a.predict(features), a.predict(features))
    small = quick_model(seed=1, few_shot_threshold=0)
    small.fit(features[:10], throughputs[:10])  # tiny data still trains
    assert not small.uses_random_fallback and small.last_fit.n_valid_programs == 0


def test_task_ids_normalise_per_task():
    # Two tasks whose throughputs differ 1000x: per-task normalisation makes both learnable.
    features, throughputs = synthetic_programs(400, seed=10, fail_rate=0.0)
    task = np.arange(400) % 2
    scaled = np.where(task == 1, throughputs * 1000.0, throughputs)
    model = xgb_model()
    model.fit(features, scaled, task_ids=[f"task{t}" for t in task])
    scores = model.predict(features)
    for t in (0, 1):
        assert pairwise_accuracy(scores[task == t], throughputs[task == t]) > 0.8


def test_random_model_is_seeded_and_round_trips(tmp_path):
    features, throughputs = synthetic_programs(30, seed=11)
    a, b = RandomModel(seed=5), RandomModel(seed=5)
    a.update(features, throughputs)
    assert a.n_programs == 30
    assert np.array_equal(a.predict(features), b.predict(features))
    scores = a.predict(features + [None])
    assert np.isneginf(scores[-1]) and ((scores[:-1] >= 0) & (scores[:-1] < 1)).all()
    a.save(tmp_path / "r.npz")
    loaded = RandomModel.load(tmp_path / "r.npz")
    assert np.array_equal(loaded.predict(features), a.predict(features))
    with pytest.raises(ValueError, match="random"):
        XGBModel.load(tmp_path / "r.npz")


def test_bad_inputs_raise_clear_errors(tmp_path):
    model = quick_model()
    good = [np.ones((2, 4))] * 3
    with pytest.raises(ValueError, match="3 feature matrices but 2 throughputs"):
        model.fit(good, [1.0, 2.0])
    with pytest.raises(ValueError, match=">= 0"):
        model.fit(good, [1.0, -2.0, 3.0])
    with pytest.raises(ValueError, match="finite"):
        model.fit(good, [1.0, np.nan, 3.0])
    with pytest.raises(ValueError, match="has 5 features, expected 4"):
        model.fit([np.ones((2, 4)), np.ones((2, 5))], [1.0, 2.0])
    with pytest.raises(ValueError, match="2-D"):
        model.predict([np.ones((2, 3, 4))])
    model.fit(good, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="expected 4"):
        model.predict([np.ones((2, 6))])
    with pytest.raises(ValueError, match="eta"):
        XGBParams(eta=0)
    with pytest.raises(FileNotFoundError):
        XGBModel.load(tmp_path / "absent.npz")
    (tmp_path / "junk").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a saved cost model"):
        XGBModel.load(tmp_path / "junk")


def test_empty_and_all_invalid_batches():
    model = quick_model(few_shot_threshold=0)
    model.fit([], [])
    assert not model.is_trained and model.n_programs == 0
    assert model.predict([]).shape == (0,)
    model.update([None, np.zeros((0, 4))], [0.0, 0.0])  # nothing to train on, still counted
    assert not model.is_trained and model.n_programs == 2
    model.update([np.ones((2, 4)), 2 * np.ones((3, 4))], [1.0, 2.0])
    assert model.is_trained and model.n_programs == 4
    assert np.isneginf(model.predict([None])[0])


def test_prior_programs_train_from_the_first_update_but_leave_the_few_shot_rounds(tmp_path):
    features, throughputs = synthetic_programs(200, seed=8)
    model = quick_model(few_shot_threshold=32)
    assert model.add_prior(features[:150], throughputs[:150], task_ids=["other"] * 150) == 150
    assert model.n_prior == 150 and model.n_programs == 150
    assert not model.is_trained and model.uses_random_fallback  # nothing trains yet
    model.update(features[150:170], throughputs[150:170], task_ids=["own"] * 20)
    assert model.is_trained and model.last_fit.n_programs == 170  # trained on both
    assert model.uses_random_fallback  # 20 programs of its own, fewer than 32
    model.save(tmp_path / "m.npz", include_data=False)
    assert XGBModel.load(tmp_path / "m.npz").uses_random_fallback  # the priors still don't count
    model.update(features[170:], throughputs[170:], task_ids=["own"] * 30)
    assert not model.uses_random_fallback and model.last_fit.n_programs == 200
    model.fit(features[:10], throughputs[:10])  # fit forgets the priors too
    assert model.n_prior == 0
