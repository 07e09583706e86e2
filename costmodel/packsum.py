"""The pack-sum loss of Ansor's XGBoost cost model, as plain numpy functions.

Each training row is one statement; a program's predicted score is the *sum* of its rows'
predictions (the rows form a "pack"). XGBoost cannot express that loss itself, so we give it the
per-row gradient and hessian of

    loss = 1/2 * sum over programs P of  w_P * (sum_{i in P} pred_i - y_P)^2

where ``y_P`` is the program's target: its throughput divided by the best throughput of its task
(TVM), or the log2 of that (see "Targets" below); and the weight ``w_P`` is that normalised
throughput (floored at ``weight_floor``): errors on fast programs cost more than errors on slow
ones, which is what ranking the best candidates needs. TVM's auto_scheduler uses exactly ``w = y``
(floor 0), so failed programs (throughput 0) carry no weight there.

For row i of program P (n_P rows, packed sum s_P):

    d loss / d pred_i = w_P * (s_P - y_P)        d^2 loss / d pred_i d pred_j = w_P  (i, j in P)

The hessian is not diagonal: it couples all rows of a program. XGBoost wants one hessian value per
row, and its leaf step is -eta * sum(grad) / sum(hess). Two choices (``XGBParams.hessian``):

- ``"diagonal"`` (TVM): hess_i = w_P, the diagonal. When the n_P rows of a program fall in the same
  leaf, as they do in early trees, the program's sum moves eta * n_P times the residual, so with
  eta * n_P > 2 the residual grows every round and training diverges. TVM's programs have a few
  statements; ours have 5 to 30, and this diverges on them.
- ``"pack"`` (default): hess_i = w_P * n_P. Since w 1 1^T <= n w I, the quadratic with this
  diagonal curvature lies above the loss (a majorizer), so a leaf step is at most eta times a Newton
  step on it and every round decreases the loss, however a program's rows spread over leaves. The
  learning rate keeps its meaning: when all rows of a program share a leaf, its sum moves
  eta * residual, as one row of a plain regression would.

  (An earlier version used hess_i = w_P * max(1, eta * n_P). The eta in it cancels XGBoost's eta:
  the step became a full Newton step whatever the learning rate, depth-10 trees fitted the training
  set within ~5 rounds, and every later tree was a single leaf; with early stopping the model kept
  4 trees. On real measurements it ranked held-out programs at ~0.75 pairwise accuracy.)

With a single row per program (``program_rows`` other than "statements") both choices are the
plain weighted squared error: grad = w (pred - y), hess = w.

Targets (``XGBParams.label``): ``y_P`` is either the normalised throughput itself (``"linear"``,
as TVM) or its log2 (``"log"``, floored at ``LOG_LABEL_FLOOR``), which spreads the many slow
programs apart instead of squeezing them near 0; the weights are the normalised throughput either
way. See ``training_targets``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from costmodel.metrics import topk_recall


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


LABELS = ("log", "linear")
# Log targets are floored at log2 of this normalised throughput (~1/1000 of the task's best), so a
# failed program (throughput 0) gets a finite target; it weighs 0 unless XGBParams.weight_floor > 0.
LOG_LABEL_FLOOR = 2.0**-10


def training_targets(normalised: np.ndarray, label: str) -> np.ndarray:
    """What the trees fit for each program: ``"linear"``, the normalised throughput itself, or
    ``"log"``, log2(max(normalised throughput, LOG_LABEL_FLOOR)) (0 for the task's best)."""
    if label == "linear":
        return normalised.astype(np.float64)
    if label == "log":
        return np.log2(np.maximum(normalised, LOG_LABEL_FLOOR))
    raise ValueError(f"label must be one of {LABELS}, got {label!r}")


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
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row gradient and hessian of the weighted pack-sum squared error.

    Args:
        row_preds: current prediction of every row, ``(n_rows,)``.
        group_ids: program index of every row, ``(n_rows,)``.
        labels: target per program (``training_targets``), ``(n_programs,)``.
        weights: weight per program, ``(n_programs,)``.
        hessian: ``"pack"`` (w_P * n_P) or ``"diagonal"`` (w_P, as TVM); see above.
    """
    n_programs = len(labels)
    residual = pack_sums(row_preds, group_ids, n_programs) - labels
    grad = (weights * residual)[group_ids]
    if hessian == "pack":
        rows_per_program = np.bincount(group_ids, minlength=n_programs)
        hess = (weights * rows_per_program)[group_ids]
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


XGBObjective = Callable[[np.ndarray, object], tuple[np.ndarray, np.ndarray]]
XGBMetric = Callable[[np.ndarray, object], list[tuple[str, float]]]


def make_objective(
    group_ids: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    hessian: str = "pack",
) -> XGBObjective:
    """An ``obj`` for ``xgb.train``, bound to the pack layout of the training DMatrix.

    XGBoost passes the DMatrix back to the objective, but a DMatrix cannot carry our pack ids, so
    the objective closes over them (one objective per training run).
    """

    def objective(row_preds: np.ndarray, _dtrain: object) -> tuple[np.ndarray, np.ndarray]:
        return pack_sum_grad_hess(row_preds, group_ids, labels, weights, hessian)

    return objective


def make_metric(
    group_ids: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    top_true_frac: float = 0.05,
    top_pred_frac: float = 0.10,
) -> XGBMetric:
    """A ``custom_metric`` for ``xgb.train``, bound to the pack layout of the one eval DMatrix.

    Reports ``p-rmse``, the *weighted* RMSE of the packed sums, sqrt(sum w r^2 / sum w): the loss
    the objective minimises, so early stopping (which minimises it) watches what training fits
    (unweighted when every weight is 0). And ``p-recall``, the top-k recall of programs.
    """
    n_programs = len(labels)
    total_weight = float(np.sum(weights))
    metric_weights = weights if total_weight > 0 else np.ones(n_programs)

    def metric(row_preds: np.ndarray, _deval: object) -> list[tuple[str, float]]:
        scores = pack_sums(row_preds, group_ids, n_programs)
        if not n_programs:
            return [("p-recall", 0.0), ("p-rmse", 0.0)]
        rmse = float(np.sqrt(np.average((scores - labels) ** 2, weights=metric_weights)))
        recall = topk_recall(scores, labels, top_true_frac, top_pred_frac)
        # p-rmse last: xgboost's early stopping watches the last metric unless told otherwise.
        return [("p-recall", recall), ("p-rmse", rmse)]

    return metric
