"""Feature matrices of one lowered program, or of one State (lowered first)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autosched.errors import AutoschedError
from autosched.features.table import FEATURE_NAMES, feature_row
from autosched.features.walk import ProgramWalker
from autosched.lower import ir

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State

N_FEATURES = len(FEATURE_NAMES)


def extract_features(program: ir.Program) -> np.ndarray:
    """The (statements x N_FEATURES) float32 matrix of a lowered program, one row per Store /
    AllReduce in program order (the statements lowering replicated per virtual thread are rows
    of their own; `vthread_len` is the kernel's `vthread`)."""
    infos = ProgramWalker(program).run()
    flat: list[float] = []
    for s in infos:
        flat.extend(feature_row(s))
    arr = np.array(flat, dtype=np.float64).reshape(len(infos), N_FEATURES)
    # every raw value is >= 0 (counts, sizes, strides, ratios, one-hots)
    return np.log2(arr + 1.0).astype(np.float32)


def state_features(state: State) -> np.ndarray | None:
    """Lower `state` and extract its features; None when it cannot be lowered (any
    AutoschedError: a sketch, an illegal attach, a GPU limit)."""
    from autosched.lower.lowering import lower

    try:
        program = lower(state)
    except AutoschedError:
        return None
    return extract_features(program)
