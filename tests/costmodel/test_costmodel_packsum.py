"""Tests of the pack-sum objective: gradients, hessians, normalisation (costmodel/packsum.py)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import pack_features
from costmodel.packsum import (
    LOG_LABEL_FLOOR,
    make_metric,
    normalise_throughputs,
    pack_sum_grad_hess,
    pack_sum_loss,
    pack_sums,
    training_targets,
)


def tiny_problem():
    """Three programs of 2, 1 and 3 rows with labels, weights and current row predictions."""
    rng = np.random.default_rng(0)
    group_ids = np.array([0, 0, 1, 2, 2, 2])
    labels = np.array([0.8, 1.0, 0.3])
    weights = np.array([0.8, 1.0, 0.05])
    preds = rng.normal(0.2, 0.3, len(group_ids))
    return preds, group_ids, labels, weights


def test_gradient_matches_finite_differences():
    preds, group_ids, labels, weights = tiny_problem()
    grad, _ = pack_sum_grad_hess(preds, group_ids, labels, weights)
    eps = 1e-6
    for i in range(len(preds)):
        step = np.zeros_like(preds)
        step[i] = eps
        numeric = (
            pack_sum_loss(preds + step, group_ids, labels, weights)
            - pack_sum_loss(preds - step, group_ids, labels, weights)
        ) / (2 * eps)
        assert grad[i] == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_diagonal_hessian_matches_finite_differences():
    preds, group_ids, labels, weights = tiny_problem()
    _, hess = pack_sum_grad_hess(preds, group_ids, labels, weights, hessian="diagonal")
    eps = 1e-4
    for i in range(len(preds)):
        step = np.zeros_like(preds)
        step[i] = eps
        numeric = (
            pack_sum_loss(preds + step, group_ids, labels, weights)
            - 2 * pack_sum_loss(preds, group_ids, labels, weights)
            + pack_sum_loss(preds - step, group_ids, labels, weights)
        ) / eps**2
        assert hess[i] == pytest.approx(numeric, rel=1e-4)


def test_pack_hessian_majorizes_the_loss():
    """loss(p + d) <= loss(p) + g.d + 1/2 sum(hess * d^2) for any d: no step of at most a Newton
    step on this quadratic (XGBoost takes eta <= 1 of one) overshoots."""
    preds, group_ids, labels, weights = tiny_problem()
    grad, hess = pack_sum_grad_hess(preds, group_ids, labels, weights, hessian="pack")
    base = pack_sum_loss(preds, group_ids, labels, weights)
    rng = np.random.default_rng(1)
    for _ in range(200):
        d = rng.normal(0, 1, len(preds))
        bound = base + grad @ d + 0.5 * np.sum(hess * d**2)
        assert pack_sum_loss(preds + d, group_ids, labels, weights) <= bound + 1e-12
    # It is the diagonal times the program's row count; with one row per program, the diagonal.
    _, diagonal = pack_sum_grad_hess(preds, group_ids, labels, weights, hessian="diagonal")
    np.testing.assert_allclose(hess, diagonal * np.bincount(group_ids)[group_ids])
    single = np.arange(3)
    _, one_row = pack_sum_grad_hess(preds[:3], single, labels, weights, hessian="pack")
    np.testing.assert_array_equal(one_row, weights)


def test_unknown_hessian_raises():
    preds, group_ids, labels, weights = tiny_problem()
    with pytest.raises(ValueError, match="hessian"):
        pack_sum_grad_hess(preds, group_ids, labels, weights, hessian="full")


def test_pack_sums_and_metric():
    preds, group_ids, labels, weights = tiny_problem()
    sums = pack_sums(preds, group_ids, 4)  # program 3 has no rows
    np.testing.assert_allclose(sums, [preds[0] + preds[1], preds[2], preds[3:].sum(), 0.0])
    metric = dict(make_metric(group_ids, labels, weights)(preds, None))
    # Weighted like the loss: sqrt(2 * loss / sum(w)).
    expected = np.sqrt(np.sum(weights * (sums[:3] - labels) ** 2) / np.sum(weights))
    assert metric["p-rmse"] == pytest.approx(expected)
    assert metric["p-rmse"] == pytest.approx(
        np.sqrt(2 * pack_sum_loss(preds, group_ids, labels, weights) / weights.sum())
    )
    assert 0.0 <= metric["p-recall"] <= 1.0
    # All weights 0 (every program failed): plain RMSE rather than 0 / 0.
    unweighted = dict(make_metric(group_ids, labels, np.zeros(3))(preds, None))
    assert unweighted["p-rmse"] == pytest.approx(np.sqrt(np.mean((sums[:3] - labels) ** 2)))


def test_training_targets():
    normalised = np.array([1.0, 0.5, 0.25, 0.0, 2.0**-12])
    np.testing.assert_array_equal(training_targets(normalised, "linear"), normalised)
    np.testing.assert_array_equal(training_targets(normalised, "log"), [0, -1, -2, -10, -10])
    assert np.log2(LOG_LABEL_FLOOR) == -10
    with pytest.raises(ValueError, match="label"):
        training_targets(normalised, "sqrt")


def test_normalise_throughputs_per_task():
    y = np.array([2.0, 4.0, 0.0, 30.0, 10.0, 0.0])
    tasks = np.array(["a", "a", "a", "b", "b", "c"])
    np.testing.assert_allclose(normalise_throughputs(y, tasks), [0.5, 1.0, 0.0, 1.0, 1 / 3, 0.0])


def test_pack_features_layout():
    a = np.arange(8, dtype=np.float64).reshape(2, 4)
    b = np.ones((3, 4), np.float32)
    packed = pack_features([a, None, b, np.zeros((0, 4))])
    assert packed.rows.dtype == np.float32 and packed.rows.shape == (5, 4)
    np.testing.assert_array_equal(packed.group_ids, [0, 0, 2, 2, 2])
    np.testing.assert_array_equal(packed.lengths, [2, 0, 3, 0])
    np.testing.assert_array_equal(packed.valid, [True, False, True, False])
    assert packed.n_programs == 4 and packed.n_features == 4
    empty = pack_features([None, None])
    assert empty.rows.shape[0] == 0 and empty.n_features is None
