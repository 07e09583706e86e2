"""Cost models that rank candidate programs from per-statement feature matrices.

numpy in, numpy out: this package knows nothing of autosched's IR. A program is a 2-D float array
``(n_statements, n_features)`` (or None when it could not be lowered); its measured throughput is a
float, higher = better, 0 for a failed program.

    model = XGBModel(seed=0)
    model.fit(features, throughputs)       # or model.update(...) to add data and retrain
    scores = model.predict(features)       # one score per program, -inf for invalid ones
"""

from costmodel.base import CostModel, FeatureMatrix, PackedFeatures, pack_features
from costmodel.metrics import pairwise_accuracy, peak_at_k, topk_recall
from costmodel.random_model import RandomModel
from costmodel.xgb_model import FitReport, XGBModel
from costmodel.xgb_params import XGBParams

__all__ = [
    "CostModel",
    "FeatureMatrix",
    "FitReport",
    "PackedFeatures",
    "RandomModel",
    "XGBModel",
    "XGBParams",
    "pack_features",
    "pairwise_accuracy",
    "peak_at_k",
    "topk_recall",
]
