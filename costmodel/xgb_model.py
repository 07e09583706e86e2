"""The learned cost model: gradient-boosted trees on program features, after Ansor's.

By default the statement rows of a program are reduced to one row (their column-wise max,
``program_rows.py``) and the trees score programs. With ``program_rows="statements"`` the model is
Ansor's: it scores each *statement*, and a program's score is the sum of its statements' scores.
Either way training fits the scores to the programs' measured throughputs, normalised per task
(log2 of them by default), with the weighted squared error of ``packsum.py`` (with one row per
program, plain weighted squared error). XGBoost cannot train incrementally in a useful way here,
so like Ansor every ``update`` retrains from scratch on all data seen so far.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from costmodel.base import (
    CostModel,
    FeatureMatrix,
    PackedFeatures,
    check_task_ids,
    check_throughputs,
    pack_features,
    read_model_file,
    rng_from_json,
    rng_state_to_json,
    write_model_file,
)
from costmodel.fit_report import FitReport
from costmodel.metrics import topk_recall
from costmodel.packsum import make_metric, make_objective, normalise_throughputs, training_targets
from costmodel.program_rows import STATEMENTS, reduce_statements
from costmodel.ranking import train_ranker
from costmodel.xgb_params import XGBParams

if TYPE_CHECKING:  # xgboost loads on first use, not with the package
    import xgboost as xgb

logger = logging.getLogger("autosched.costmodel")


@dataclasses.dataclass(frozen=True)
class _Chunk:
    """One batch of measured programs as given to ``fit``/``update``."""

    packed: PackedFeatures
    throughputs: np.ndarray
    task_ids: np.ndarray


def _base_score(labels: np.ndarray, weights: np.ndarray, train: np.ndarray) -> float:
    """The weighted mean training target: where boosting starts, with one row per program.

    Log targets lie around -3, far from XGBoost's default 0.5: the first trees would spend their
    rounds learning that offset. (The pack-sum starts at 0 instead: any per-row start would give
    a program a prior of n_statements times it, a bias by statement count the trees cannot see.)
    """
    w = weights[train]
    return float(np.average(labels[train], weights=w)) if w.sum() > 0 else 0.0


class XGBModel(CostModel):
    """XGBoost cost model: program rows (default) or Ansor's pack-sum over statements.

    ``XGBModel(seed=0)`` uses the defaults of ``XGBParams``; ``XGBModel(params, seed)`` or keyword
    overrides (``XGBModel(seed=0, nthread=1, few_shot_threshold=0)``) change them.

    Few-shot fallback: until ``params.few_shot_threshold`` programs (default 64) have been given to
    ``fit``/``update``, ``predict`` returns uniform random scores drawn from a generator seeded with
    ``seed`` (so a run is reproducible), even though ``fit`` does train on whatever data it has.
    Set ``few_shot_threshold=0`` to always use the trees once trained. With a ``pretrained``
    model (``costmodel/pretrained.py``), that model ranks instead of the random scores until
    then: a new task's first round is steered by what other workloads taught it, and from the
    threshold on the model's own trees, retrained from scratch on the task's measurements (and
    any ``add_prior`` data) at every update, take over.

    Inputs: features are one 2-D float array ``(n_statements, n_features)`` per program, or None /
    an empty array for an invalid program; throughputs are >= 0, higher = better, 0 for a failed
    program; optional task ids (ints or workload keys) make the normalisation per task (default:
    all programs belong to one task).
    """

    def __init__(
        self,
        params: XGBParams | None = None,
        seed: int = 0,
        pretrained: CostModel | None = None,
        **overrides: Any,
    ) -> None:
        params = params or XGBParams()
        self.params = dataclasses.replace(params, **overrides) if overrides else params
        self.seed = seed
        self.pretrained = pretrained
        self.extra_meta: dict = {}  # what `save(extra_meta=...)` stored beside the model
        self.last_fit: FitReport | None = None
        self._rng = np.random.default_rng(seed)  # draws the few-shot random scores only
        self._chunks: list[_Chunk] = []
        self._n_unkept = 0  # programs seen by a saved model whose data was not saved
        self._n_prior = 0  # programs given by add_prior (kept, not counted as the task's own)
        self._n_features: int | None = None
        self._booster: xgb.Booster | None = None
        self._n_at_last_train = 0

    # ----- state -----

    @property
    def n_programs(self) -> int:
        """Measured programs seen so far (valid or not), across fit/update and save/load."""
        return self._n_unkept + sum(chunk.packed.n_programs for chunk in self._chunks)

    @property
    def is_trained(self) -> bool:
        """Whether a booster exists (it may still be unused: see ``uses_random_fallback``)."""
        return self._booster is not None

    @property
    def n_prior(self) -> int:
        """Programs given by ``add_prior`` (part of ``n_programs``)."""
        return self._n_prior

    @property
    def before_own_trees(self) -> bool:
        """True while ``predict`` does not use this model's own trees (untrained, or fewer
        programs than the threshold, not counting those given by ``add_prior``)."""
        own = self.n_programs - self._n_prior
        return self._booster is None or own < self.params.few_shot_threshold

    @property
    def uses_random_fallback(self) -> bool:
        """True while ``predict`` ranks at random (before its own trees, without a pretrained
        model)."""
        return self.before_own_trees and self.pretrained is None

    @property
    def uses_pretrained(self) -> bool:
        """True while ``predict`` ranks with the pretrained model."""
        return self.before_own_trees and self.pretrained is not None

    def set_threads(self, nthread: int) -> None:
        """Train and predict with `nthread` CPU threads from now on."""
        self.params = dataclasses.replace(self.params, nthread=nthread)
        if self._booster is not None:
            self._booster.set_param({"nthread": nthread})

    # ----- training -----

    def fit(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> None:
        """Forget all data seen so far, then train on these programs."""
        self._chunks = []
        self._n_unkept = 0
        self._n_prior = 0
        self._n_features = None
        self._booster = None
        self._add(features, throughputs, task_ids)
        self._train()

    def update(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> None:
        """Add these programs to all data seen so far and retrain from scratch on everything
        (``add``, then ``retrain``: it may skip training, see ``params.retrain_min_growth``)."""
        if self.add(features, throughputs, task_ids):
            self.retrain()

    def add(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> int:
        """``update`` without its training: keep these programs, retrain later (``retrain``, or
        on a ``snapshot`` in another thread). Returns how many were kept."""
        return self._add(features, throughputs, task_ids)

    def retrain(self) -> None:
        """Retrain from scratch on all data kept, unless it has grown by less than
        ``params.retrain_min_growth`` since the last training run."""
        growth = self.n_programs - self._n_at_last_train
        if self._booster is None or growth >= self.params.retrain_min_growth * (
            self._n_at_last_train
        ):
            self._train()

    def snapshot(self) -> XGBModel:
        """A copy holding the data kept so far, to be retrained elsewhere (another thread) while
        this model goes on predicting and keeping data; ``adopt`` takes its trees back."""
        copied = copy.copy(self)
        copied._chunks = list(self._chunks)
        return copied

    def adopt(self, trained: XGBModel) -> None:
        """Predict with the trees of ``trained`` (a retrained ``snapshot``) from now on."""
        self._booster, self.last_fit = trained._booster, trained.last_fit
        self._n_at_last_train = trained._n_at_last_train

    def add_prior(
        self,
        features: Sequence[FeatureMatrix],
        throughputs: Sequence[float] | np.ndarray,
        task_ids: Sequence[Any] | np.ndarray | None = None,
    ) -> int:
        """Keep these programs (measured for other tasks, typically) as training data from the
        next ``update`` on, without training now and without counting them towards
        ``few_shot_threshold``. Transfer learning that does not steer a search before it has
        data of its own: the search's first round stays what the few-shot rule makes it
        (random), and from its first update on the model learns from these programs and the
        search's together (give distinct task ids: throughputs are normalised per task).
        Returns the number of programs kept."""
        n = self._add(features, throughputs, task_ids)
        self._n_prior += n
        return n

    def _add(self, features, throughputs, task_ids) -> int:
        packed = pack_features(features, self._n_features)
        y = check_throughputs(throughputs, packed.n_programs)
        tasks = check_task_ids(task_ids, packed.n_programs)
        if packed.n_programs:
            self._chunks.append(_Chunk(packed, y, tasks))
            self._n_features = packed.n_features
        return packed.n_programs

    def _gather(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All kept data: rows, program lengths, throughputs, task ids."""
        width = self._n_features or 0
        # A chunk of only invalid programs has no rows (and possibly no known width): skip it.
        rows = [c.packed.rows for c in self._chunks if len(c.packed.rows)]
        return (
            np.concatenate(rows) if rows else np.zeros((0, width), np.float32),
            np.concatenate([c.packed.lengths for c in self._chunks] or [np.zeros(0, np.int64)]),
            np.concatenate([c.throughputs for c in self._chunks] or [np.zeros(0)]),
            np.concatenate([c.task_ids for c in self._chunks] or [np.zeros(0, str)]),
        )

    def _train(self) -> None:
        import xgboost as xgb

        start = time.perf_counter()
        self._n_at_last_train = self.n_programs
        rows, lengths, throughputs, tasks = self._gather()
        normalised = normalise_throughputs(throughputs, tasks)
        labels = training_targets(normalised, self.params.label)
        weights = np.maximum(normalised, self.params.weight_floor)
        reductions = self.params.reductions
        if reductions:  # one row per program: the pack-sum loss becomes plain squared error
            rows = reduce_statements(rows, lengths, reductions)
            lengths = (lengths > 0).astype(np.int64)
        if self.params.objective == "pairwise":
            self._train_ranker(rows, lengths, normalised, tasks, start)
            return
        group_ids = np.repeat(np.arange(len(lengths)), lengths)

        # Programs without statements contribute no row and no gradient: leave them out.
        programs = np.flatnonzero(lengths > 0)
        if len(programs) == 0:
            self._booster = None
            self.last_fit = None
            return
        train, valid = self._split(programs)

        def subset(selected: np.ndarray) -> tuple[xgb.DMatrix, np.ndarray]:
            """The rows of the selected programs, with group ids renumbered 0..len-1."""
            renumber = np.full(len(lengths), -1, dtype=np.int64)
            renumber[selected] = np.arange(len(selected))
            row_mask = renumber[group_ids] >= 0
            dmatrix = xgb.DMatrix(rows[row_mask], nthread=self.params.threads)
            return dmatrix, renumber[group_ids[row_mask]]

        dtrain, train_gids = subset(train)
        objective = make_objective(train_gids, labels[train], weights[train], self.params.hessian)
        if len(valid):
            deval, eval_gids = subset(valid)
            eval_name, eval_set = "valid", valid
        else:
            deval, eval_gids, eval_name, eval_set = dtrain, train_gids, "train", train

        base_score = _base_score(labels, weights, train) if reductions else 0.0
        train_params = self.params.booster_params(self.seed, base_score)
        metric = make_metric(eval_gids, labels[eval_set], weights[eval_set])
        if self.params.early_stopping_rounds > 0:
            history: dict = {}
            stop = xgb.callback.EarlyStopping(
                rounds=self.params.early_stopping_rounds,
                metric_name="p-rmse",
                data_name=eval_name,
                maximize=False,
                save_best=True,
            )
            self._booster = xgb.train(
                train_params,
                dtrain,
                num_boost_round=self.params.num_boost_round,
                evals=[(deval, eval_name)],
                obj=objective,
                custom_metric=metric,
                callbacks=[stop],
                evals_result=history,
                verbose_eval=False,
            )
            kept = self._booster.num_boosted_rounds() - 1
            final = {name: values[kept] for name, values in history[eval_name].items()}
        else:
            # No per-round evaluation: on 1000 programs it would cost a third of the training time.
            self._booster = xgb.train(
                train_params, dtrain, num_boost_round=self.params.num_boost_round, obj=objective
            )
            final = dict(metric(self._booster.predict(deval, output_margin=True), deval))
        n_rounds = self._booster.num_boosted_rounds()
        self.last_fit = FitReport(
            n_programs=len(programs),
            n_train_rows=dtrain.num_row(),
            n_valid_programs=len(valid),
            n_rounds=n_rounds,
            valid_rmse=float(final["p-rmse"]),
            valid_recall=float(final["p-recall"]),
            seconds=time.perf_counter() - start,
        )
        logger.debug("XGBModel trained: %s", self.last_fit)

    def _train_ranker(self, rows, lengths, normalised, tasks, start: float) -> None:
        """The pairwise objective's training run (``ranking.py``): one row per program with
        statements, ordered within each task; the report's recall is on the training set."""
        import xgboost as xgb

        with_rows = lengths > 0
        trained = train_ranker(
            rows,
            normalised[with_rows],
            tasks[with_rows],
            self.params.booster_params(self.seed),
            self.params.num_boost_round,
        )
        if trained is None:
            self._booster, self.last_fit = None, None
            return
        self._booster, order = trained
        scores = self._booster.predict(xgb.DMatrix(rows[order]), output_margin=True)
        self.last_fit = FitReport(
            n_programs=int(with_rows.sum()),
            n_train_rows=len(order),
            n_valid_programs=0,
            n_rounds=self._booster.num_boosted_rounds(),
            valid_rmse=float("nan"),
            valid_recall=topk_recall(scores, normalised[with_rows][order]),
            seconds=time.perf_counter() - start,
        )
        logger.debug("XGBModel trained (pairwise): %s", self.last_fit)

    def _split(self, programs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Split program indices into (train, held out), both sorted; held out may be empty (always
        when early stopping is off).

        The split is seeded by the model seed and the data size, so a given data set always gets the
        same split, independently of how many predictions were drawn in between.
        """
        if self.params.early_stopping_rounds == 0:  # a held-out part would only be data lost
            return programs, programs[:0]
        n_valid = round(self.params.valid_fraction * len(programs))
        if n_valid < self.params.min_valid_programs or n_valid >= len(programs):
            return programs, programs[:0]
        split_rng = np.random.default_rng([self.seed, len(programs)])
        shuffled = split_rng.permutation(programs)
        return np.sort(shuffled[n_valid:]), np.sort(shuffled[:n_valid])

    # ----- prediction -----

    def predict(self, features: Sequence[FeatureMatrix]) -> np.ndarray:
        """One score per program, higher = predicted faster; ``-inf`` for None/empty matrices.

        Random in [0, 1) while ``uses_random_fallback``; the pretrained model's scores while
        ``uses_pretrained``; otherwise the trees' prediction for the
        program's reduced row, or with ``program_rows="statements"`` the sum over its statements
        of the trees' per-statement predictions. The scale is the training target's (``label``).

        Raises:
            ValueError: a matrix's feature count differs from the training data's.
        """
        packed = pack_features(features, self._n_features)
        reductions = self.params.reductions
        booster = self._booster
        if self.uses_pretrained and self.pretrained is not None:
            return np.asarray(self.pretrained.predict(features), dtype=np.float64)
        if self.uses_random_fallback or booster is None:
            scores = self._rng.uniform(0.0, 1.0, packed.n_programs)
        elif len(packed.rows) == 0:
            scores = np.zeros(packed.n_programs)
        elif reductions:
            reduced = reduce_statements(packed.rows, packed.lengths, reductions)
            scores = np.zeros(packed.n_programs)
            scores[packed.valid] = booster.inplace_predict(reduced, predict_type="margin")
        else:
            row_preds = booster.inplace_predict(packed.rows, predict_type="margin")
            scores = packed.program_sums(row_preds)
        scores[~packed.valid] = -np.inf
        return scores

    def predict_statements(self, features: FeatureMatrix) -> np.ndarray:
        """Per-statement scores of one program (their sum is its ``predict`` score once trained).

        Raises:
            RuntimeError: the model has not been trained, or scores programs, not statements
                (``program_rows`` other than "statements").
        """
        if self._booster is None:
            raise RuntimeError("XGBModel.predict_statements needs a trained model (call fit first)")
        if self.params.reductions:
            raise RuntimeError(
                f"XGBModel.predict_statements needs program_rows={STATEMENTS!r} (this model scores "
                f"whole programs: program_rows={self.params.program_rows!r})"
            )
        packed = pack_features([features], self._n_features)
        if len(packed.rows) == 0:
            return np.zeros(0)
        return self._booster.inplace_predict(packed.rows, predict_type="margin").astype(np.float64)

    # ----- persistence -----

    def save(
        self, path: str | os.PathLike, include_data: bool = True, extra_meta: dict | None = None
    ) -> None:
        """Write params, booster, random state and (by default) the training data to one file.

        With ``include_data=False`` the file is much smaller, and a loaded model predicts the same,
        but its next ``update`` retrains on the new data only (it still counts the old programs
        towards ``few_shot_threshold``). ``extra_meta``: JSON-able facts stored beside the model
        (what it was trained on), back as ``extra_meta`` of the loaded model. The ``pretrained``
        model is not saved.
        """
        meta = {
            "kind": "xgb",
            "params": dataclasses.asdict(self.params),
            "seed": self.seed,
            "n_features": self._n_features,
            "n_unkept": self.n_programs if not include_data else self._n_unkept,
            "n_at_last_train": self._n_at_last_train,
            "n_prior": self._n_prior,
            "rng_state": rng_state_to_json(self._rng),
            "last_fit": dataclasses.asdict(self.last_fit) if self.last_fit else None,
            "extra": extra_meta if extra_meta is not None else self.extra_meta,
        }
        arrays: dict[str, np.ndarray] = {}
        if self._booster is not None:
            arrays["booster"] = np.frombuffer(bytes(self._booster.save_raw("ubj")), np.uint8)
        if include_data and self._chunks:
            rows, lengths, throughputs, tasks = self._gather()
            arrays.update(rows=rows, lengths=lengths, throughputs=throughputs, task_ids=tasks)
        write_model_file(path, meta, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> XGBModel:
        """Read a model written by ``save``; its predictions equal the saved model's exactly."""
        import xgboost as xgb

        meta, arrays = read_model_file(path, "xgb")
        params = meta["params"]
        if int(meta["version"]) < 2:
            # Version 1 had only the pack-sum on linear targets; its other defaults were saved.
            params = {**params, "program_rows": STATEMENTS, "label": "linear"}
        model = cls(XGBParams(**params), seed=meta["seed"])
        model._n_features = meta["n_features"]
        model._n_unkept = int(meta["n_unkept"])
        model._n_at_last_train = int(meta["n_at_last_train"])
        model._n_prior = int(meta.get("n_prior", 0))
        model._rng = rng_from_json(meta["rng_state"])
        model.extra_meta = meta.get("extra") or {}
        if meta["last_fit"] is not None:
            model.last_fit = FitReport(**meta["last_fit"])
        if "booster" in arrays:
            # No training parameters here: a Booster re-applies the ones it was built with after
            # load_model, and a base_score among them would replace the trained one.
            booster = xgb.Booster({"verbosity": 0})
            booster.load_model(bytearray(arrays["booster"].tobytes()))
            # The saved nthread was the saving machine's thread count; use this machine's.
            booster.set_param({"nthread": model.params.threads})
            model._booster = booster
        if "rows" in arrays:
            lengths = arrays["lengths"].astype(np.int64)
            packed = PackedFeatures(
                rows=arrays["rows"].astype(np.float32, copy=False),
                group_ids=np.repeat(np.arange(len(lengths)), lengths),
                lengths=lengths,
                n_features=model._n_features,
            )
            model._chunks = [_Chunk(packed, arrays["throughputs"], arrays["task_ids"])]
        return model
