"""What every sketch rule shares: the answer of `condition` (`Cond`), the context a rule sees
(`SketchContext`: the GPU's limits and the sketch parameters), the `SketchRule` base class, and
the multi-level tiling that several rules apply."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from autosched.schedule.loop_state import State
from autosched.schedule.stage import REDUCE, SPATIAL
from autosched.sketch.params import SketchParams
from autosched.sketch.stage_steps import level_names
from measure.hardware import HardwareParams


class Cond(enum.Enum):
    SKIP = 0
    APPLY = 1
    APPLY_AND_SKIP_REST = 2


@dataclass(frozen=True)
class SketchContext:
    """What rules may look at besides the state: the GPU's limits and the sketch parameters."""

    hardware: HardwareParams = field(default_factory=HardwareParams)
    params: SketchParams = field(default_factory=SketchParams)


class SketchRule:
    """One sketch rule: `condition` decides, `apply` transforms."""

    def condition(self, ctx: SketchContext, state: State, i: int) -> Cond:
        raise NotImplementedError

    def apply(self, ctx: SketchContext, state: State, i: int) -> list[tuple[State, int]]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__


# ---- multi-level tiling (shared by two rules) --------------------------------------------


def multi_level_tile(state: State, i: int, structure: str) -> tuple[State, list[int]]:
    """Split every spatial iterator of stage i into structure.count('S') levels and every
    reduction iterator into structure.count('R'), then order the levels as `structure` says.
    Returns the state and the spatial splits' step ids (axis order)."""
    n_s, n_r = structure.count("S"), structure.count("R")
    stage = state.stages[i]
    levels: dict[str, list[list[str]]] = {SPATIAL: [], REDUCE: []}
    spatial_ids = []
    for it in stage.root_iters:
        n = n_s if it.kind == SPATIAL else n_r
        if it.kind == SPATIAL:
            spatial_ids.append(len(state.steps))
        state = state.split(i, it.name, [None] * (n - 1))
        levels[it.kind].append(level_names(it.name, n))
    order, used = [], {SPATIAL: 0, REDUCE: 0}
    for ch in structure:
        kind = SPATIAL if ch == "S" else REDUCE
        order += [names[used[kind]] for names in levels[kind]]
        used[kind] += 1
    return state.reorder(i, order), spatial_ids


def outermost_reduce_tile_iter(state: State, i: int, n_reduce_levels: int) -> str | None:
    """The last iterator of the outermost reduction tile of a multi-level tiled stage (where
    Ansor attaches shared-memory caches), or None if the stage has no such tile."""
    stage = state.stages[i]
    outer = {
        level_names(it.name, n_reduce_levels)[0] for it in stage.root_iters if it.kind == REDUCE
    }
    names = [it.name for it in stage.iters if it.name in outer]
    return names[-1] if names else None


# ---- the rules ------------------------------------------------------------------------------
