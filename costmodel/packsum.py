"""The pack-sum loss of Ansor's XGBoost cost model, as plain numpy functions.

Each training row is one statement; a program's predicted score is the *sum* of its rows'
predictions (the rows form a "pack"). XGBoost cannot express that loss itself, so we give it the
per-row gradient and hessian of

    loss = 1/2 * sum over programs P of  w_P * (sum_{i in P} pred_i - y_P)^2

where ``y_P`` is the program's throughput divided by the best throughput of its task, and the weight
``w_P`` is ``y_P`` itself (floored at ``weight_floor``): errors on fast programs cost more than errors
on slow ones, which is what ranking the best candidates needs. TVM's auto_scheduler uses exactly
``w = y`` (floor 0), so failed programs (y = 0) carry no weight there.

For row i of program P (n_P rows, packed sum s_P):

    d loss / d pred_i = w_P * (s_P - y_P)        d^2 loss / d pred_i d pred_j = w_P  (i, j in P)

The hessian is not diagonal: it couples all rows of a program. XGBoost wants one hessian value per
row, and its leaf step is -sum(grad) / sum(hess). Two choices (``XGBParams.hessian``):

- ``"diagonal"`` (TVM): hess_i = w_P, the diagonal. When the n_P rows of a program fall in the same
  leaf, as they do in early trees, the program's sum moves n_P times the single-row Newton step, so
  with eta * n_P > 2 the residual grows every round and training diverges. TVM's programs have a
  few statements; ours have ~20, and this diverges on them.
- ``"pack"`` (default): hess_i = w_P * max(1, eta * n_P). XGBoost multiplies each leaf step by
  the learning rate eta, so the step taken is a full Newton step on the quadratic with curvature
  hess / eta >= n_P * w_P. Since w 1 1^T <= n w I, that quadratic lies above the loss (a
  majorizer), hence every round decreases the loss, however a program's rows spread over leaves.
  For programs with eta * n_P <= 1 this is exactly TVM's diagonal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .metrics import topk_recall


def normalise_throughputs(throughputs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
    """Divide each throughput by the largest throughput of the same task (0 stays 0).

    A task whose programs all failed (max 0) keeps all labels at 0.
    """
    _, task_index = np.unique(task_ids, return_inverse=True)
    task_max = np.zeros(task_index.max() + 1 if len(task_index) else 0)
    np.maximum.at(task_max, task_index, throughputs)
    denominator = task_max[task_index]
    return np.divide(
        throughputs, denominator, out=np.zeros_like(throughputs), where=denominator > 0
    )


def pack_sums(row_preds: np.ndarray, group_ids: np.ndarray, n_programs: int) -> np.ndarray:
    """Per-program sums of per-row predictions (float64)."""
    return np.bincount(group_ids, weights=row_preds.astype(np.float64), minlength=n_programs)


HESSIANS = ("pack", "diagonal")


def pack_sum_grad_hess(
    row_preds: np.ndarray,
    group_ids: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    hessian: str = "pack",
    eta: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row gradient and hessian of the weighted pack-sum squared error.

    Args:
        row_preds: current prediction of every row, ``(n_rows,)``.
        group_ids: program index of every row, ``(n_rows,)``.
        labels: normalised throughput per program, ``(n_programs,)``.
        weights: weight per program, ``(n_programs,)``.
        hessian: ``"pack"`` (w_P * max(1, eta * n_P)) or ``"diagonal"`` (w_P, as TVM); see above.
        eta: the booster's learning rate (only ``"pack"`` uses it).
    """
    n_programs = len(labels)
    residual = pack_sums(row_preds, group_ids, n_programs) - labels
    grad = (weights * residual)[group_ids]
    if hessian == "pack":
        rows_per_program = np.bincount(group_ids, minlength=n_programs)
        hess = (weights * np.maximum(1.0, eta * rows_per_program))[group_ids]
    elif hessian == "diagonal":
        hess = weights[group_ids]
    else:
        raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
    return grad, hess


def pack_sum_loss(
    row_preds: np.ndarray, group_ids: np.ndarray, labels: np.ndarray, weights: np.ndarray
) -> float:
    """The loss whose gradient ``pack_sum_grad_hess`` returns (used by the gradient check)."""
    residual = pack_sums(row_preds, group_ids, len(labels)) - labels
    return float(0.5 * np.sum(weights * residual**2))


def pack_sum_rmse(row_preds: np.ndarray, group_ids: np.ndarray, labels: np.ndarray) -> float:
    """Root-mean-square error between packed sums and labels, one term per program."""
    residual = pack_sums(row_preds, group_ids, len(labels)) - labels
    return float(np.sqrt(np.mean(residual**2))) if len(labels) else 0.0


XGBObjective = Callable[[np.ndarray, object], tuple[np.ndarray, np.ndarray]]
XGBMetric = Callable[[np.ndarray, object], list[tuple[str, float]]]


def make_objective(
    group_ids: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    hessian: str = "pack",
    eta: float = 1.0,
) -> XGBObjective:
    """An ``obj`` for ``xgb.train``, bound to the pack layout of the training DMatrix.

    XGBoost passes the DMatrix back to the objective, but a DMatrix cannot carry our pack ids, so
    the objective closes over them (one objective per training run).
    """

    def objective(row_preds: np.ndarray, _dtrain: object) -> tuple[np.ndarray, np.ndarray]:
        return pack_sum_grad_hess(row_preds, group_ids, labels, weights, hessian, eta)

    return objective


def make_metric(
    group_ids: np.ndarray,
    labels: np.ndarray,
    top_true_frac: float = 0.05,
    top_pred_frac: float = 0.10,
) -> XGBMetric:
    """A ``custom_metric`` for ``xgb.train``, bound to the pack layout of the one eval DMatrix.

    Reports ``p-rmse`` (early stopping minimises it) and ``p-recall`` (top-k recall of programs).
    """
    n_programs = len(labels)

    def metric(row_preds: np.ndarray, _deval: object) -> list[tuple[str, float]]:
        scores = pack_sums(row_preds, group_ids, n_programs)
        rmse = float(np.sqrt(np.mean((scores - labels) ** 2))) if n_programs else 0.0
        recall = topk_recall(scores, labels, top_true_frac, top_pred_frac) if n_programs else 0.0
        # p-rmse last: xgboost's early stopping watches the last metric unless told otherwise.
        return [("p-recall", recall), ("p-rmse", rmse)]

    return metric
