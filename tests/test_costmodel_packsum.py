"""Tests of the pack-sum objective: gradients, hessians, normalisation (costmodel/packsum.py)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import pack_features
from costmodel.packsum import (
    make_metric,
    normalise_throughputs,
    pack_sum_grad_hess,
    pack_sum_loss,
    pack_sums,
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


@pytest.mark.parametrize("eta", [0.2, 0.5, 1.0])
def test_pack_hessian_over_eta_majorizes_the_loss(eta):
    """loss(p + d) <= loss(p) + g.d + 1/2 sum(hess / eta * d^2) for any d: steps never overshoot."""
    preds, group_ids, labels, weights = tiny_problem()
    grad, hess = pack_sum_grad_hess(preds, group_ids, labels, weights, hessian="pack", eta=eta)
    base = pack_sum_loss(preds, group_ids, labels, weights)
    rng = np.random.default_rng(1)
    for _ in range(200):
        d = rng.normal(0, 1, len(preds))
        bound = base + grad @ d + 0.5 * np.sum(hess / eta * d**2)
        assert pack_sum_loss(preds + d, group_ids, labels, weights) <= bound + 1e-12
    # Where eta * n_rows <= 1 it is TVM's diagonal hessian.
    _, diagonal = pack_sum_grad_hess(preds, group_ids, labels, weights, hessian="diagonal")
    n_rows = np.bincount(group_ids)[group_ids]
    np.testing.assert_array_equal(hess[eta * n_rows <= 1], diagonal[eta * n_rows <= 1])


def test_unknown_hessian_raises():
    preds, group_ids, labels, weights = tiny_problem()
    with pytest.raises(ValueError, match="hessian"):
        pack_sum_grad_hess(preds, group_ids, labels, weights, hessian="full")


def test_pack_sums_and_metric():
    preds, group_ids, labels, _ = tiny_problem()
    sums = pack_sums(preds, group_ids, 4)  # program 3 has no rows
    np.testing.assert_allclose(sums, [preds[0] + preds[1], preds[2], preds[3:].sum(), 0.0])
    metric = dict(make_metric(group_ids, labels)(preds, None))
    expected = np.sqrt(np.mean((sums[:3] - labels) ** 2))
    assert metric["p-rmse"] == pytest.approx(expected)
    assert 0.0 <= metric["p-recall"] <= 1.0


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
