"""Init rule DoubleBuffer: whether the shared caches computed at one loop are fetched one
iteration ahead (`State.double_buffer`)."""

from __future__ import annotations

from autosched.sketch.init_base import InitRule


class DoubleBuffer(InitRule):
    """Draws, per loop that shared caches are computed at, whether all of them are
    double-buffered (`State.double_buffer`: fetched one iteration ahead, one barrier per
    iteration instead of two, the copy overlapping the computation), with probability
    `SketchParams.double_buffer_probability`. The loop's caches go together: one left single-
    buffered keeps its two barriers in every iteration. The doubled shared memory is checked
    with the rest of the program's limits once the state is lowered."""

    def apply(self, ctx, plan, state, rng):
        loops: dict[tuple, list[int]] = {}
        for i, stage in enumerate(state.stages):
            if stage.scope == "shared" and stage.attach is not None:
                loops.setdefault(stage.attach, []).append(i)
        for caches in loops.values():
            if rng.random() < ctx.params.double_buffer_probability:
                for i in caches:
                    state = state.double_buffer(i)
        return state
