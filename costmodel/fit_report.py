"""What one training run of the learned cost model did: the size of its data, the rounds it
kept, and how well it ranks its held-out programs (for logs, saved models and tests)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class FitReport:
    """What the last training run did (for logs and tests).

    Attributes:
        n_programs: programs trained or validated on (those with at least one statement).
        n_train_rows: rows the trees were fitted on (statements, or programs with program rows).
        n_valid_programs: programs held out for early stopping (0 = none: the figures below are
            on the training set).
        n_rounds: boosting rounds in the kept model.
        valid_rmse: weighted RMSE of the kept model's program scores against the targets (in
            the label's units), on the held-out programs.
        valid_recall: top-k recall of the kept model on the held-out programs.
        seconds: wall time of the training run, data preparation included.
    """

    n_programs: int
    n_train_rows: int
    n_valid_programs: int
    n_rounds: int
    valid_rmse: float
    valid_recall: float
    seconds: float
