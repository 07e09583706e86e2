"""The cost model shipped with the package: an ``XGBModel`` pre-trained on measured records of
many workloads, so that the first round of a new task is ranked instead of drawn at random.

The file (``costmodel/data/pretrained-v<N>.npz``, written by ``benchmarks/pretrain.py``) is an
``XGBModel`` saved without its training data, plus the names of the features it was trained on.
Columns are matched by name: when today's feature table has every feature the model was trained
on (features were added or reordered since), the model reads its own columns out of today's
matrices (``ColumnsByName``). When a feature it was trained on is gone, it would read the wrong
values, so ``load_pretrained`` then warns once and returns None: the caller keeps the random
first round.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from costmodel.base import CostModel, FeatureMatrix
from costmodel.xgb_model import XGBModel

PRETRAINED_VERSION = 1
PRETRAINED_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", f"pretrained-v{PRETRAINED_VERSION}.npz"
)


class PretrainedMismatchWarning(UserWarning):
    """The shipped model was trained on another feature table (or is missing): not used."""


class ColumnsByName(CostModel):
    """A trained model that predicts from the columns `columns` of wider feature matrices: a
    model trained on an older feature table, read through today's. Prediction only: it is a
    prior, never trained again here."""

    def __init__(self, model: CostModel, columns: Sequence[int]) -> None:
        self.model = model
        self.columns = np.asarray(columns, dtype=np.int64)

    def predict(self, features: Sequence[FeatureMatrix]) -> np.ndarray:
        picked = [None if f is None or len(f) == 0 else f[:, self.columns] for f in features]
        return self.model.predict(picked)

    def fit(self, features: Any, throughputs: Any, task_ids: Any = None) -> None:
        raise TypeError("ColumnsByName is a read-only prior: train the model it wraps instead")

    update = fit

    def save(self, path: str | os.PathLike) -> None:
        raise TypeError("ColumnsByName is not saved: save the model it wraps")

    @classmethod
    def load(cls, path: str | os.PathLike) -> ColumnsByName:
        raise TypeError("ColumnsByName is made by load_pretrained, not loaded")

    @property
    def uses_random_fallback(self) -> bool:
        return self.model.uses_random_fallback


def save_pretrained(
    model: XGBModel,
    feature_names: Sequence[str],
    path: str | os.PathLike = PRETRAINED_FILE,
    about: dict | None = None,
) -> None:
    """Write a trained model without its data, tagged with the feature names it was trained on
    and `about` (what it was trained on: JSON-able facts for whoever reads the file)."""
    if not model.is_trained:
        raise ValueError("save_pretrained needs a trained model")
    meta = {
        "pretrained_version": PRETRAINED_VERSION,
        "feature_names": list(feature_names),
        "about": about or {},
    }
    model.save(path, include_data=False, extra_meta=meta)


def load_pretrained(
    feature_names: Sequence[str], path: str | os.PathLike = PRETRAINED_FILE, nthread: int = 1
) -> CostModel | None:
    """The pre-trained model at `path` predicting with `nthread` threads from matrices whose
    columns are `feature_names` (the model itself when they are the names it was trained on, a
    ``ColumnsByName`` view when they hold those and more), or None with one
    ``PretrainedMismatchWarning`` when the file is missing or a feature it needs is gone."""
    if not os.path.exists(path):
        warnings.warn(
            f"no pre-trained cost model at {os.fspath(path)}: the first round is random",
            PretrainedMismatchWarning,
            stacklevel=2,
        )
        return None
    model = XGBModel.load(path)
    trained_on = model.extra_meta.get("feature_names")
    here = {name: i for i, name in enumerate(feature_names)}
    missing = [n for n in trained_on or () if n not in here]
    if trained_on is None or missing:
        count = len(trained_on) if trained_on is not None else "unknown"
        gone = f", {len(missing)} of them gone (e.g. {missing[0]})" if missing else ""
        warnings.warn(
            f"the pre-trained cost model was trained on another feature table ({count} features"
            f"{gone}; here {len(feature_names)}): not used, the first round is random",
            PretrainedMismatchWarning,
            stacklevel=2,
        )
        return None
    model.set_threads(nthread)
    if trained_on == list(feature_names):
        return model
    return ColumnsByName(model, [here[n] for n in trained_on])
