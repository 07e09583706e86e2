"""The pairwise ranking objective: trees that order a task's programs instead of fitting their
throughputs (``XGBParams.objective="pairwise"``).

The search only ever asks the model which candidates are faster, and with a few hundred measured
programs a regression spends its trees on the scale of the throughputs. XGBoost's LambdaMART
pairwise loss fits the order alone: each program's relevance grade is its normalised throughput
in ``RANK_GRADES`` steps (the task's best program gets the top grade), and pairs are formed within
a task only. Failed programs (throughput 0) are left out, as the regression's zero weights leave
them out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import xgboost as xgb

OBJECTIVES = ("regression", "pairwise")
RANK_GRADES = 16


def relevance_grades(normalised: np.ndarray) -> np.ndarray:
    """Integer grades 0..RANK_GRADES of throughputs normalised to their task's best."""
    return np.floor(np.clip(normalised, 0.0, 1.0) * RANK_GRADES).astype(np.int64)


def train_ranker(
    rows: np.ndarray,
    normalised: np.ndarray,
    tasks: np.ndarray,
    booster_params: dict,
    num_boost_round: int,
) -> tuple[xgb.Booster, np.ndarray] | None:
    """A booster trained with the pairwise ranking loss on one row per program, and the indices
    of the programs it was trained on (the correct ones, grouped by task); None when no program
    is correct."""
    import xgboost as xgb

    correct = np.flatnonzero(normalised > 0)
    if len(correct) == 0:
        return None
    _, task_index = np.unique(tasks[correct], return_inverse=True)
    order = correct[np.argsort(task_index, kind="stable")]
    dtrain = xgb.DMatrix(rows[order], nthread=booster_params.get("nthread"))
    dtrain.set_label(relevance_grades(normalised[order]))
    dtrain.set_group(np.bincount(task_index).tolist())
    params = {
        **booster_params,
        "objective": "rank:pairwise",
        "lambdarank_pair_method": "mean",
        "lambdarank_num_pair_per_sample": 8,
        "base_score": 0.0,
    }
    return xgb.train(params, dtrain, num_boost_round=num_boost_round), order
