"""The cost model shipped with the package: an ``XGBModel`` pre-trained on measured records of
many workloads, so that the first round of a new task is ranked instead of drawn at random.

The file (``costmodel/data/pretrained-v<N>.npz``, written by ``benchmarks/pretrain.py``) is an
``XGBModel`` saved without its training data, plus the names of the features it was trained on.
A model read by a program whose feature table differs would read every column as the wrong
feature, so ``load_pretrained`` then warns once and returns None: the caller keeps today's
behaviour (a random first round).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

from costmodel.xgb_model import XGBModel

PRETRAINED_VERSION = 1
PRETRAINED_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", f"pretrained-v{PRETRAINED_VERSION}.npz"
)


class PretrainedMismatchWarning(UserWarning):
    """The shipped model was trained on another feature table (or is missing): not used."""


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
) -> XGBModel | None:
    """The pre-trained model at `path` predicting with `nthread` threads, or None with one
    ``PretrainedMismatchWarning`` when the file is missing or was trained on other features."""
    if not os.path.exists(path):
        warnings.warn(
            f"no pre-trained cost model at {os.fspath(path)}: the first round is random",
            PretrainedMismatchWarning,
            stacklevel=2,
        )
        return None
    model = XGBModel.load(path)
    trained_on = model.extra_meta.get("feature_names")
    if trained_on != list(feature_names):
        count = len(trained_on) if trained_on is not None else "unknown"
        warnings.warn(
            f"the pre-trained cost model was trained on another feature table ({count} features, "
            f"here {len(feature_names)}): not used, the first round is random",
            PretrainedMismatchWarning,
            stacklevel=2,
        )
        return None
    model.set_threads(nthread)
    return model
