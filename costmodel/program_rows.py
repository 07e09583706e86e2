"""Program-level rows: a program's statement rows reduced to one row (``XGBParams.program_rows``).

Ansor's model scores each statement and sums the scores over a program (``packsum.py``). The
alternative here reduces the statement rows of a program column by column (max, sum, min, mean)
and concatenates the reductions into one row per program, which a tree model scores directly.

Why: a statement's row carries its own loop nest, thread binding and buffer accesses, but a GPU
kernel's throughput is not a sum of per-statement costs (the slowest part, occupancy and the
shared-memory footprint of all statements together decide it). On real H100 measurements of
random matmul and conv2d states, the column-wise max of the statement rows ranks held-out programs
clearly better than the pack-sum (see ``XGBParams``), and it trains on one row per program instead
of ~15, so it is also several times faster.
"""

from __future__ import annotations

import numpy as np

# The reductions a program_rows spec may name, joined by "_" ("max", "sum_max", ...).
REDUCTIONS = ("sum", "max", "min", "mean")

# The spec that keeps one row per statement and trains with the pack-sum objective.
STATEMENTS = "statements"


def parse_program_rows(spec: str) -> tuple[str, ...]:
    """The reductions of a spec (``()`` for ``"statements"``).

    Raises:
        ValueError: an unknown or repeated reduction, or an empty spec.
    """
    if spec == STATEMENTS:
        return ()
    names = tuple(spec.split("_"))
    if not spec or any(n not in REDUCTIONS for n in names) or len(set(names)) != len(names):
        raise ValueError(
            f"program_rows must be {STATEMENTS!r} or '_'-joined distinct names of {REDUCTIONS}, "
            f"got {spec!r}"
        )
    return names


def reduce_statements(
    rows: np.ndarray, lengths: np.ndarray, reductions: tuple[str, ...]
) -> np.ndarray:
    """One row per program with at least one statement, in program order.

    Args:
        rows: ``(n_rows, n_features)`` statement rows of all programs, stacked in program order.
        lengths: ``(n_programs,)`` rows per program (0 for an invalid program, which gets no row).
        reductions: names from ``REDUCTIONS``; the output has ``len(reductions) * n_features``
            columns, one block per reduction in this order.

    Returns:
        ``(number of programs with lengths > 0, len(reductions) * n_features)`` float32.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    valid = lengths > 0
    starts = (np.cumsum(lengths) - lengths)[valid]
    n_features = rows.shape[1]
    if not valid.any():
        return np.zeros((0, len(reductions) * n_features), np.float32)
    blocks = []
    for name in reductions:
        if name == "max":
            block = np.maximum.reduceat(rows, starts, axis=0)
        elif name == "min":
            block = np.minimum.reduceat(rows, starts, axis=0)
        else:  # sum and mean add in float64: a sum of thousands of float32 values loses digits
            block = np.add.reduceat(rows.astype(np.float64), starts, axis=0)
            if name == "mean":
                block /= lengths[valid][:, None]
        blocks.append(block.astype(np.float32, copy=False))
    return np.concatenate(blocks, axis=1)
