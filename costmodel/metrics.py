"""Ranking-quality metrics for cost models: how well predicted scores order measured programs.

All functions take ``pred`` (model scores, higher = predicted faster; ``-inf`` allowed) and ``true``
(measured throughputs, higher = faster) as 1-D arrays of the same length.
"""

from __future__ import annotations

import math

import numpy as np

# Above this many distinct pairs, pairwise_accuracy samples pairs instead of enumerating them.
DEFAULT_MAX_PAIRS = 2_000_000
# Rows of the pair matrix compared at once in the exact path (bounds memory to ~block * n bytes).
_EXACT_BLOCK_CELLS = 4_000_000


def _as_pair(pred: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=np.float64).reshape(-1)
    t = np.asarray(true, dtype=np.float64).reshape(-1)
    if p.shape != t.shape:
        raise ValueError(f"pred has {p.size} values but true has {t.size}")
    if np.isnan(t).any():
        raise ValueError("true values must not be NaN")
    return p, t


def _pair_credit(p_i: np.ndarray, p_j: np.ndarray, t_i: np.ndarray, t_j: np.ndarray):
    """(credit, counted) for pairs: 1 if ordered like true, 0.5 if pred ties, 0 if reversed."""
    true_order = np.sign(t_i - t_j)
    # -inf vs -inf gives NaN difference; those are ties of the prediction.
    with np.errstate(invalid="ignore"):
        pred_order = np.nan_to_num(np.sign(p_i - p_j), nan=0.0)
    counted = true_order != 0
    credit = np.where(pred_order == 0, 0.5, (pred_order == true_order).astype(np.float64))
    return float(np.sum(credit[counted])), int(np.count_nonzero(counted))


def pairwise_accuracy(
    pred: np.ndarray,
    true: np.ndarray,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
) -> float:
    """Fraction of program pairs that the prediction orders like the measurement.

    Only pairs whose true values differ count. A pair the prediction ties counts as half correct
    (so a constant predictor scores 0.5, like a random one). When there are more than ``max_pairs``
    pairs, ``max_pairs`` pairs are drawn at random (deterministically from ``seed``); otherwise all
    pairs are compared, vectorised in blocks.

    Returns:
        a value in [0, 1], or NaN when no pair has different true values.
    """
    p, t = _as_pair(pred, true)
    n = len(p)
    if n < 2:
        return math.nan
    credit, counted = 0.0, 0
    if n * (n - 1) // 2 <= max_pairs:
        block = max(1, _EXACT_BLOCK_CELLS // n)
        for start in range(0, n, block):
            i = np.arange(start, min(start + block, n))[:, None]
            j = np.arange(n)[None, :]
            upper = j > i  # each unordered pair once
            ii, jj = np.broadcast_to(i, upper.shape)[upper], np.broadcast_to(j, upper.shape)[upper]
            c, k = _pair_credit(p[ii], p[jj], t[ii], t[jj])
            credit, counted = credit + c, counted + k
    else:
        rng = np.random.default_rng(seed)
        ii = rng.integers(0, n, size=max_pairs)
        jj = rng.integers(0, n - 1, size=max_pairs)
        jj = jj + (jj >= ii)  # uniform over j != i
        credit, counted = _pair_credit(p[ii], p[jj], t[ii], t[jj])
    return credit / counted if counted else math.nan


def _top_indices(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values (NaN and -inf last; stable among equal values)."""
    order = np.argsort(-np.nan_to_num(values, nan=-np.inf), kind="stable")
    return order[:k]


def _count(frac: float, n: int) -> int:
    if not 0 < frac <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {frac}")
    return max(1, math.ceil(frac * n))


def topk_recall(
    pred: np.ndarray,
    true: np.ndarray,
    top_true_frac: float = 0.05,
    top_pred_frac: float = 0.10,
) -> float:
    """Fraction of the truly best programs that the model ranks among its own best.

    The truly best are the top ``ceil(top_true_frac * n)`` programs by ``true``; the model's best
    are its top ``ceil(top_pred_frac * n)`` by ``pred``. With the defaults: how many of the real
    top-5% are in the predicted top-10% (a random ranking scores about 0.10).

    Returns:
        a value in [0, 1], or NaN for empty input.
    """
    p, t = _as_pair(pred, true)
    n = len(p)
    if n == 0:
        return math.nan
    top_true = _top_indices(t, _count(top_true_frac, n))
    top_pred = _top_indices(p, _count(top_pred_frac, n))
    return float(np.isin(top_true, top_pred).mean())


def peak_at_k(pred: np.ndarray, true: np.ndarray, k: int) -> float:
    """Best true value among the model's top-k programs, divided by the best true value overall.

    This is what a search that measures the model's top-k candidates would find (1.0 = the best).
    Returns NaN for empty input or when every true value is <= 0.
    """
    p, t = _as_pair(pred, true)
    if len(p) == 0 or t.max() <= 0:
        return math.nan
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return float(t[_top_indices(p, k)].max() / t.max())
