"""Tunable settings of ``XGBModel``, in one frozen dataclass (defaults chosen on GPU data)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from costmodel.packsum import HESSIANS, LABELS
from costmodel.program_rows import parse_program_rows
from costmodel.ranking import OBJECTIVES

# cores per training / prediction thread when ``nthread`` is not given (see ``XGBParams``)
CORES_PER_THREAD = 4


def available_cores() -> int:
    """CPU cores this process may run on (respects taskset / cgroup affinity where visible)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class XGBParams:
    """Settings of ``XGBModel``. Change one with ``dataclasses.replace`` or ``XGBModel(name=...)``.

    What is fitted:
        program_rows: how a program's statement rows become training rows.
            "max" (default): one row per program, the column-wise max of its statement rows; the
                trees score programs directly. Other '_'-joined reductions of sum / max / min /
                mean ("sum_max", ...) concatenate several such rows.
            "statements": Ansor's pack-sum: one row per statement, a program's score is the sum of
                its statements' scores (``packsum.py``); ``hessian`` applies.
            See ``program_rows.py`` for why.
        objective: "regression" (default) fits the scores to the targets below; "pairwise" fits
            only their order within a task (``ranking.py``: LambdaMART's pairwise loss on
            relevance grades of the normalised throughput; program rows only, no early
            stopping; label, weight_floor and hessian do not apply).
        label: the target, from the throughput normalised by its task's best: "log" (default):
            its log2, floored at 2**-10 (``packsum.training_targets``); "linear": itself (TVM).
        weight_floor: each program's weight in the loss is ``max(normalised throughput,
            weight_floor)`` (whatever the label). TVM uses the throughput itself (floor 0), so
            failed programs weigh nothing; a floor > 0 also fits failed programs to the lowest
            target.

        Why these defaults: ranking held-out GPU measurements of random programs
        (``autosched.search.cost_model.holdout_ranking``), "max" + "log" ranks best; "sum_max"
        ranks the same at twice the training time; "linear" labels rank a little worse, and the
        pack-sum ("statements", Ansor's choice) worse still at several times the training time.

    Booster:
        max_depth, gamma, min_child_weight, eta: the tree booster's parameters (min_child_weight
            bounds a leaf's summed hessian, i.e. its summed program weights with program rows).
        max_bin: histogram bins per feature. XGBoost's default is 256; 64 trains faster with the
            same ranking quality on our benchmarks (most features are log-scaled counts anyway).

    Training:
        num_boost_round: most boosting rounds per training run.
        early_stopping_rounds: 0 (default): train ``num_boost_round`` rounds on all programs. > 0:
            hold out ``valid_fraction`` of the programs, stop when their weighted RMSE (the loss
            being minimised) has not improved for this many rounds and keep the best round's model.
            On the measurements above, holding out 20% costs more ranking quality than stopping
            early gains.
        valid_fraction: share of the programs (never single rows) held out for early stopping.
        min_valid_programs: when the held-out share would be smaller than this, nothing is held out
            and early stopping watches the training set instead (what TVM always does).
        hessian: per-row hessian of the pack-sum loss: "pack" (default: weight * n_statements,
            never diverges, keeps eta's meaning) or "diagonal" (weight, as TVM; diverges once eta *
            n_statements > 2). See ``packsum.py``. With program rows both are the plain weight.
        retrain_min_growth: ``update`` retrains only once the data has grown by this fraction since
            the last training run (TVM uses 0.2 to bound training time on long logs; 0 = always).

    Prediction:
        few_shot_threshold: until the model has been given this many measured programs (failed
            ones included), ``predict`` returns uniform random scores, like Ansor's
            ``num_warmup_sample`` (100 there): a model fitted on a handful of programs ranks worse
            than chance often enough that exploring at random is the better use of early
            measurements. 64, one default round, is enough: a model fitted on one random round
            already picks another run's fastest states about twice as often as chance, so the
            second round is steered instead of random. 0 disables the fallback.

    Resources:
        nthread: CPU threads for training and prediction; None = a quarter of the cores
            available (``CORES_PER_THREAD``), at least one. A search trains and predicts while
            its compilers and lowering workers keep every core busy. XGBoost's OpenMP threads
            meet at a barrier many times per tree, and one that the compilers preempt holds
            the others there for a scheduler time slice: on a machine of two busy cores, two
            threads make a training run of a second take minutes. The matrices are small (a
            few tens of thousands of rows), so a few threads lose little where cores are many.
    """

    program_rows: str = "max"
    objective: str = "regression"
    label: str = "log"
    max_depth: int = 6
    gamma: float = 0.0
    min_child_weight: float = 1.0
    eta: float = 0.1
    max_bin: int = 64
    num_boost_round: int = 300
    early_stopping_rounds: int = 0
    valid_fraction: float = 0.2
    min_valid_programs: int = 20
    hessian: str = "pack"
    weight_floor: float = 0.0
    retrain_min_growth: float = 0.0
    few_shot_threshold: int = 64
    nthread: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.max_depth >= 1, "max_depth must be >= 1"),
            (self.gamma >= 0, "gamma must be >= 0"),
            (self.min_child_weight >= 0, "min_child_weight must be >= 0"),
            (0 < self.eta <= 1, "eta must be in (0, 1]"),
            (self.max_bin >= 2, "max_bin must be >= 2"),
            (self.num_boost_round >= 1, "num_boost_round must be >= 1"),
            (self.early_stopping_rounds >= 0, "early_stopping_rounds must be >= 0"),
            (0 <= self.valid_fraction < 1, "valid_fraction must be in [0, 1)"),
            (self.min_valid_programs >= 1, "min_valid_programs must be >= 1"),
            (self.hessian in HESSIANS, f"hessian must be one of {HESSIANS}"),
            (self.label in LABELS, f"label must be one of {LABELS}"),
            (self.objective in OBJECTIVES, f"objective must be one of {OBJECTIVES}"),
            (0 <= self.weight_floor <= 1, "weight_floor must be in [0, 1]"),
            (self.retrain_min_growth >= 0, "retrain_min_growth must be >= 0"),
            (self.few_shot_threshold >= 0, "few_shot_threshold must be >= 0"),
            (self.nthread is None or self.nthread >= 1, "nthread must be None or >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"XGBParams: {message}")
        try:
            parse_program_rows(self.program_rows)
        except ValueError as exc:
            raise ValueError(f"XGBParams: {exc}") from None
        if self.objective == "pairwise" and not self.reductions:
            raise ValueError(
                "XGBParams: objective='pairwise' ranks whole programs: it needs program rows "
                f"(program_rows other than {self.program_rows!r})"
            )
        if self.objective == "pairwise" and self.early_stopping_rounds:
            raise ValueError("XGBParams: objective='pairwise' trains without early stopping")

    @property
    def reductions(self) -> tuple[str, ...]:
        """The reductions of ``program_rows`` (``()``: one row per statement, pack-sum)."""
        return parse_program_rows(self.program_rows)

    @property
    def threads(self) -> int:
        """The thread count actually used: ``nthread``, or a quarter of the available cores."""
        if self.nthread is not None:
            return self.nthread
        return max(1, available_cores() // CORES_PER_THREAD)

    def booster_params(self, seed: int, base_score: float = 0.0) -> dict:
        """The parameter dict for ``xgb.train`` / ``xgb.Booster``.

        ``base_score`` is the prediction every row starts from (``XGBModel`` sets it from the data:
        see ``_train``); a loaded booster keeps the one it was trained with.
        """
        return {
            "tree_method": "hist",
            "max_depth": self.max_depth,
            "gamma": self.gamma,
            "min_child_weight": self.min_child_weight,
            "eta": self.eta,
            "max_bin": self.max_bin,
            "nthread": self.threads,
            "seed": seed,
            "verbosity": 0,
            # Only our pack-sum metrics make sense; the built-in one would read absent labels.
            "disable_default_eval_metric": 1,
            # XGBoost adds base_score to every *row* (0.5 by default): not to be left to xgboost,
            # since with the pack-sum a program of n statements starts at n * base_score.
            "base_score": base_score,
        }
