"""Feature matrices of one lowered program, or of one State (lowered first)."""

from __future__ import annotations

from typing import Collection

import numpy as np

from .. import ir
from ..errors import AutoschedError
from .table import FEATURE_NAMES, feature_row
from .walk import ProgramWalker

N_FEATURES = len(FEATURE_NAMES)


def extract_features(program: ir.Program, vthread_vars: Collection[str] = ()) -> np.ndarray:
    """The (statements x N_FEATURES) float32 matrix of a lowered program, one row per Store /
    AllReduce in program order (the statements lowering replicated per virtual thread are rows
    of their own; `vthread_len` is the kernel's `vthread`). `vthread_vars` is ignored (see
    `vthread_loop_vars`)."""
    infos = ProgramWalker(program).run()
    flat: list[float] = []
    for s in infos:
        flat.extend(feature_row(s))
    arr = np.array(flat, dtype=np.float64).reshape(len(infos), N_FEATURES)
    # every raw value is >= 0 (counts, sizes, strides, ratios, one-hots)
    return np.log2(arr + 1.0).astype(np.float32)


def vthread_loop_vars(state) -> set[str]:
    """Deprecated, not needed: lowering injects virtual threads and records their extent on the
    kernel (`ir.Kernel.vthread`), which the features read. Kept only while tests still pass its
    result to `extract_features` (which ignores it); remove both with those uses."""
    return {
        f"{st.name.replace('.', '_')}_{it.name}"
        for st in state.stages
        for it in st.iters
        if it.annotation == "vthread"
    }


def state_features(state) -> np.ndarray | None:
    """Lower `state` and extract its features; None when it cannot be lowered (any
    AutoschedError: a sketch, an illegal attach, a GPU limit)."""
    from ..lowering import lower

    try:
        program = lower(state)
    except AutoschedError:
        return None
    return extract_features(program)
