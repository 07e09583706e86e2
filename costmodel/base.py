"""The cost-model interface and the packing of per-program feature matrices into one row array.

A *program* is described by a 2-D feature matrix, one row per buffer-store statement. The learners
work on all rows of all programs at once: ``pack_features`` stacks the matrices into one
``(n_rows, n_features)`` array and a ``group_ids`` array that maps every row to its program, so
per-program sums are one ``np.bincount`` and nothing loops over rows in Python.
"""

from __future__ import annotations

import abc
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# One program's features: a (n_statements, n_features) array, or None for a program that could not
# be lowered (upstream marks it invalid). A matrix with zero rows is treated the same as None.
FeatureMatrix = np.ndarray | None

# Tag written into every saved model, so a file of another kind is refused with a clear message.
FILE_FORMAT = "autosched-costmodel"
# Version 2: XGBModel params gained program_rows and label (a version-1 file is a pack-sum model on
# linear targets, and loads as one).
FILE_VERSION = 2


@dataclass(frozen=True)
class PackedFeatures:
    """The rows of many programs stacked together.

    Attributes:
        rows: ``(n_rows, n_features)`` float32, finite (see ``pack_features``).
        group_ids: ``(n_rows,)`` int64, the index of the program each row belongs to.
        lengths: ``(n_programs,)`` int64, the number of rows of each program (0 when invalid).
        n_features: width of the rows; None when no program had any row.
    """

    rows: np.ndarray
    group_ids: np.ndarray
    lengths: np.ndarray
    n_features: int | None

    @property
    def n_programs(self) -> int:
        """How many programs were packed, valid or not."""
        return len(self.lengths)

    @property
    def valid(self) -> np.ndarray:
        """Boolean mask over programs: True where the program has at least one row."""
        return self.lengths > 0

    def program_sums(self, row_values: np.ndarray) -> np.ndarray:
        """Sum per-row values into one float64 value per program (0 for invalid programs)."""
        return np.bincount(
            self.group_ids, weights=row_values.astype(np.float64), minlength=self.n_programs
        )


def pack_features(
    features: Iterable[FeatureMatrix], n_features: int | None = None
) -> PackedFeatures:
    """Stack per-program feature matrices into one row array with a program id per row.

    Args:
        features: one entry per program: a 2-D array ``(n_statements, n_features)``, or None, or an
            array with no rows, for a program that is invalid (it gets no rows).
        n_features: the width every non-empty matrix must have; None accepts the width of the first
            non-empty matrix.

    Raises:
        ValueError: a matrix is not 2-D or its width differs from the others / from ``n_features``.
    """
    chunks: list[np.ndarray] = []
    lengths: list[int] = []
    width = n_features
    for index, matrix in enumerate(features):
        if matrix is None:
            lengths.append(0)
            continue
        array = np.asarray(matrix)
        if array.size == 0:
            lengths.append(0)
            continue
        if array.ndim != 2:
            raise ValueError(
                f"program {index}: feature matrix must be 2-D (n_statements x n_features), "
                f"got shape {array.shape}"
            )
        if width is None:
            width = array.shape[1]
        elif array.shape[1] != width:
            raise ValueError(
                f"program {index}: feature matrix has {array.shape[1]} features, expected {width}"
            )
        chunks.append(array)
        lengths.append(array.shape[0])

    lengths_array = np.asarray(lengths, dtype=np.int64)
    if chunks:
        with np.errstate(over="ignore"):  # float64 beyond float32's range -> inf, sanitised below
            rows = np.concatenate(chunks, axis=0).astype(np.float32, copy=False)
    else:
        rows = np.zeros((0, width or 0), dtype=np.float32)
    # Upstream feature extraction can produce NaN or +-inf (a division by a zero extent, a log of
    # 0, a float64 count too large for float32 after the cast above). XGBoost would read NaN as
    # "missing" and route it down a learned default branch, which makes the prediction depend on an
    # accident of extraction; we treat every non-finite value as 0 ("feature absent") instead, the
    # same value feature extraction uses for features that do not apply to a statement.
    if not np.isfinite(rows).all():
        rows = np.nan_to_num(rows, nan=0.0, posinf=0.0, neginf=0.0)
    group_ids = np.repeat(np.arange(len(lengths_array), dtype=np.int64), lengths_array)
    return PackedFeatures(rows=rows, group_ids=group_ids, lengths=lengths_array, n_features=width)


def check_throughputs(throughputs: Sequence[float] | np.ndarray, n_programs: int) -> np.ndarray:
    """Validate measured throughputs: a 1-D float64 array, one per program, finite and >= 0.

    Raises:
        ValueError: wrong length, negative, NaN or infinite values.
    """
    y = np.asarray(throughputs, dtype=np.float64).reshape(-1)
    if len(y) != n_programs:
        raise ValueError(f"got {n_programs} feature matrices but {len(y)} throughputs")
    if not np.isfinite(y).all():
        raise ValueError("throughputs must be finite (use 0 for a failed program)")
    if (y < 0).any():
        raise ValueError("throughputs must be >= 0 (higher is better, 0 for a failed program)")
    return y


def check_task_ids(task_ids: Sequence[Any] | np.ndarray | None, n_programs: int) -> np.ndarray:
    """Return task ids as a 1-D string array (ints and workload keys alike); None = one task."""
    if task_ids is None:
        return np.full(n_programs, "0")
    ids = np.asarray(task_ids).reshape(-1).astype(str)
    if len(ids) != n_programs:
        raise ValueError(f"got {n_programs} feature matrices but {len(ids)} task ids")
    return ids


def write_model_file(path: str | os.PathLike, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``meta`` (JSON) and ``arrays`` to one ``.npz`` file at exactly ``path``.

    No pickling is involved: arrays are numeric or unicode, ``meta`` is stored as a JSON string.
    The file is written under a temporary name and renamed, so a crash never leaves half a model.
    """
    header = {"format": FILE_FORMAT, "version": FILE_VERSION, **meta}
    buffer = io.BytesIO()
    # Typed as Any: numpy's stub would otherwise match the arrays against savez's `allow_pickle`.
    entries: dict[str, Any] = {"meta": np.array(json.dumps(header)), **arrays}
    np.savez(buffer, **entries)
    tmp_path = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(tmp_path, "wb") as handle:
        handle.write(buffer.getvalue())
    os.replace(tmp_path, path)


def read_model_file(path: str | os.PathLike, kind: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by ``write_model_file``; check it holds a model of ``kind``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a saved cost model of that kind, or of a newer version.
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as exc:
        if not os.path.exists(path):
            raise FileNotFoundError(f"no cost model file at {os.fspath(path)!r}") from exc
        raise ValueError(f"{os.fspath(path)!r} is not a saved cost model ({exc})") from exc
    if "meta" not in arrays:
        raise ValueError(f"{os.fspath(path)!r} is not a saved cost model (no metadata)")
    meta = json.loads(str(arrays.pop("meta")))
    if meta.get("format") != FILE_FORMAT or meta.get("kind") != kind:
        raise ValueError(
            f"{os.fspath(path)!r} holds {meta.get('format')}/{meta.get('kind')}, "
            f"not {FILE_FORMAT}/{kind}"
        )
    if int(meta.get("version", 0)) > FILE_VERSION:
        raise ValueError(
            f"{os.fspath(path)!r} was written by a newer costmodel (version {meta['version']})"
        )
    return meta, arrays


class CostModel(abc.ABC):
    """What the search needs from a cost model: learn from measurements, rank candidates.

    Scores are only comparable within one ``predict`` call's output and across calls on the same
    trained model; higher means predicted faster. Invalid programs (None or empty matrix) score
    ``-inf`` so that any sort puts them last.
    """

    @abc.abstractmethod
    def fit(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> None:
        """Forget all data, then train on these programs."""

    @abc.abstractmethod
    def update(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> None:
        """Add these programs to the data seen so far and retrain."""

    @abc.abstractmethod
    def predict(self, features: Sequence[FeatureMatrix]) -> np.ndarray:
        """One float64 score per program, higher = predicted faster, ``-inf`` when invalid."""

    @abc.abstractmethod
    def save(self, path: str | os.PathLike) -> None:
        """Write the model to one file; ``load`` of it predicts exactly the same scores."""

    @classmethod
    @abc.abstractmethod
    def load(cls, path: str | os.PathLike) -> CostModel:
        """Read a model written by ``save``."""

    @property
    def uses_random_fallback(self) -> bool:
        """Whether ``predict`` ranks at random for now, for want of training data (a search
        then draws its round from fresh samples alone). False by default: a model that always
        ranks by what it was given, as a deliberately random baseline does."""
        return False


def rng_state_to_json(rng: np.random.Generator) -> dict:
    """The state of a numpy Generator as plain JSON data (big ints survive JSON in Python)."""
    return dict(rng.bit_generator.state)


def rng_from_json(state: dict) -> np.random.Generator:
    """Rebuild a numpy Generator from ``rng_state_to_json``'s output."""
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)
