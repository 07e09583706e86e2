"""Tunable settings of ``XGBModel``, in one frozen dataclass (defaults follow Ansor)."""

from __future__ import annotations

import os
from dataclasses import dataclass


def available_cores() -> int:
    """CPU cores this process may run on (respects taskset / cgroup affinity where visible)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class XGBParams:
    """Settings of ``XGBModel``. Change one with ``dataclasses.replace`` or ``XGBModel(name=...)``.

    Booster (as TVM's auto_scheduler XGBModel):
        max_depth, gamma, min_child_weight, eta: the tree booster's parameters.
        max_bin: histogram bins per feature. XGBoost's default is 256; with depth-10 trees the
            per-node histograms dominate training time, and 64 bins train ~4x faster with the same
            ranking quality on our benchmarks (most features are log-scaled counts anyway).

    Training:
        num_boost_round: most boosting rounds per training run.
        early_stopping_rounds: stop when the held-out pack-sum RMSE has not improved for this many
            rounds and keep the best round's model; 0 disables early stopping.
        valid_fraction: share of the programs (never single rows) held out for early stopping.
        min_valid_programs: when the held-out share would be smaller than this, nothing is held out
            and early stopping watches the training set instead (what TVM always does).
        hessian: per-row hessian of the pack-sum loss: "pack" (default: weight * max(1, eta *
            n_statements), never diverges) or "diagonal" (weight, as TVM; diverges once eta *
            n_statements > 2, i.e. on programs of more than 10 statements at eta 0.2).
            See ``packsum.py``.
        weight_floor: each program's weight in the loss is ``max(normalised throughput,
            weight_floor)``. TVM uses the throughput itself (floor 0), so failed programs weigh
            nothing; a small floor (e.g. 0.01) also teaches the model which programs are slow.
        retrain_min_growth: ``update`` retrains only once the data has grown by this fraction since
            the last training run (TVM uses 0.2 to bound training time on long logs; 0 = always).

    Prediction:
        few_shot_threshold: until the model has been given this many measured programs (failed ones
            included), ``predict`` returns uniform random scores, like Ansor's ``num_warmup_sample``:
            a model fitted on a handful of programs ranks worse than chance often enough that
            exploring at random is the better use of early measurements. 0 disables the fallback.

    Resources:
        nthread: CPU threads for training and prediction; None = every core available.
    """

    max_depth: int = 10
    gamma: float = 0.001
    min_child_weight: float = 0.0
    eta: float = 0.2
    max_bin: int = 64
    num_boost_round: int = 300
    early_stopping_rounds: int = 50
    valid_fraction: float = 0.2
    min_valid_programs: int = 20
    hessian: str = "pack"
    weight_floor: float = 0.0
    retrain_min_growth: float = 0.0
    few_shot_threshold: int = 100
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
            (self.hessian in ("pack", "diagonal"), "hessian must be 'pack' or 'diagonal'"),
            (0 <= self.weight_floor <= 1, "weight_floor must be in [0, 1]"),
            (self.retrain_min_growth >= 0, "retrain_min_growth must be >= 0"),
            (self.few_shot_threshold >= 0, "few_shot_threshold must be >= 0"),
            (self.nthread is None or self.nthread >= 1, "nthread must be None or >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"XGBParams: {message}")

    @property
    def threads(self) -> int:
        """The thread count actually used: ``nthread``, or every available core."""
        return self.nthread if self.nthread is not None else available_cores()

    def booster_params(self, seed: int) -> dict:
        """The parameter dict for ``xgb.train`` / ``xgb.Booster``."""
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
            # XGBoost adds base_score to every *row* (0.5 by default), so a program of n statements
            # would start at n * 0.5 and trees would first have to learn to cancel that bias.
            "base_score": 0.0,
        }
