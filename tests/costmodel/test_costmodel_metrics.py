"""Tests of the ranking metrics (costmodel/metrics.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from costmodel import pairwise_accuracy, peak_at_k, topk_recall


def brute_force_pairwise(pred, true):
    credit = counted = 0.0
    for i in range(len(pred)):
        for j in range(i + 1, len(pred)):
            if true[i] == true[j]:
                continue
            counted += 1
            if pred[i] == pred[j]:
                credit += 0.5
            elif (pred[i] > pred[j]) == (true[i] > true[j]):
                credit += 1
    return credit / counted


def test_pairwise_accuracy_extremes():
    true = np.arange(50.0)
    assert pairwise_accuracy(true * 2, true) == 1.0
    assert pairwise_accuracy(-true, true) == 0.0
    assert pairwise_accuracy(np.zeros(50), true) == 0.5
    assert math.isnan(pairwise_accuracy(np.arange(5.0), np.ones(5)))
    assert math.isnan(pairwise_accuracy([1.0], [1.0]))


def test_pairwise_accuracy_matches_brute_force_with_ties_and_minus_inf():
    rng = np.random.default_rng(0)
    true = rng.integers(0, 6, 60).astype(float)  # many ties in true: those pairs do not count
    pred = true + rng.normal(0, 2, 60)
    pred[:5] = -np.inf  # invalid programs; they tie with each other
    pred[10:14] = 3.0
    assert pairwise_accuracy(pred, true) == pytest.approx(brute_force_pairwise(pred, true))


def test_pairwise_accuracy_sampled_is_close_to_exact():
    rng = np.random.default_rng(1)
    true = rng.random(3000)
    pred = true + rng.normal(0, 0.3, 3000)
    exact = pairwise_accuracy(pred, true, max_pairs=10**7)
    sampled = pairwise_accuracy(pred, true, max_pairs=200_000, seed=3)
    assert sampled == pytest.approx(exact, abs=0.01)
    assert sampled == pairwise_accuracy(pred, true, max_pairs=200_000, seed=3)  # deterministic


def test_topk_recall():
    true = np.arange(100.0)
    assert topk_recall(true, true) == 1.0
    assert topk_recall(-true, true) == 0.0
    # Top 5 true = 95..99; a prediction that puts only 97..99 in its top 10 recalls 3 / 5.
    pred = np.zeros(100)
    pred[[97, 98, 99]] = 10.0
    pred[:7] = 5.0
    assert topk_recall(pred, true) == pytest.approx(0.6)
    pred[[97, 98, 99]] = -np.inf
    assert topk_recall(pred, true) == 0.0
    assert topk_recall([1.0], [2.0]) == 1.0  # at least one program on each side
    with pytest.raises(ValueError, match="fraction"):
        topk_recall(true, true, top_true_frac=0.0)
    with pytest.raises(ValueError, match="100 values"):
        topk_recall(true, true[:10])


def test_peak_at_k():
    true = np.array([1.0, 4.0, 2.0, 8.0])
    pred = np.array([3.0, 2.0, 1.0, 0.0])
    assert peak_at_k(pred, true, 1) == pytest.approx(1 / 8)
    assert peak_at_k(pred, true, 2) == pytest.approx(4 / 8)
    assert peak_at_k(pred, true, 4) == 1.0
    assert math.isnan(peak_at_k(pred, np.zeros(4), 2))
