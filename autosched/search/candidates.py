"""What the search policy keys and orders candidates by. A candidate is its tuple of step
records (`as_records` gives any step list that form); candidates are grouped by their launch
shape (from their features), their block shape (from their split records) or the sketch they
come from, and groups are taken in turns (`in_turns`, `spread_over_sketches`)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence

import numpy as np

from autosched.features import FEATURE_NAMES
from autosched.schedule.steps import SplitStep
from autosched.search.mutations import Records
from autosched.sketch import SketchParams

_LAUNCH_COLUMNS = [
    FEATURE_NAMES.index(name)
    for name in (
        *(f"{axis}_{dim}_len" for axis in ("blockIdx", "threadIdx") for dim in "xyz"),
        "vthread_len",
        "kernel_shared_bytes",
        "kernel_local_bytes",
    )
]


def launch_shape(features) -> tuple:
    """A candidate's launch shape from its feature matrix: grid and block extents, virtual
    threads, shared bytes per block and local bytes per thread (each kernel's largest over its
    statements). Candidates that differ only in finer decisions (unroll depth, how a reduction's
    inner loops are split) share it."""
    if not isinstance(features, np.ndarray) or not features.size:
        return ()
    return tuple(np.round(features[:, _LAUNCH_COLUMNS].max(axis=0), 4).tolist())


def spread_over_sketches(
    records: list[Records], sketch_of: dict[Records, int], rng: random.Random
) -> list[Records]:
    """The records in random order, rearranged so that the sketches take turns (a sketch with
    fewer records drops out when it has none left): any prefix holds every sketch about
    equally, however many distinct states each sketch has."""
    groups: dict[int, list[Records]] = {}
    for r in records:
        groups.setdefault(sketch_of.get(r, -1), []).append(r)
    lists = list(groups.values())
    for group in lists:
        rng.shuffle(group)
    rng.shuffle(lists)
    return in_turns(lists)


def in_turns(lists: Sequence[list[Records]]) -> list[Records]:
    """The lists' items taken one from each list in turn (a list that runs out drops out)."""
    turns = itertools.zip_longest(*lists)
    return [r for turn in turns for r in turn if r is not None]


def block_shape(records: Records, n_spatial_levels: int | None = None) -> tuple[int, ...]:
    """A state's block shape: the threads of a block along each spatial axis of its multi-level
    tiled stages, read from the thread level of each spatial split (the third of the GPU
    structure's spatial levels: block, vthread, thread, then the thread's own tile). States that
    differ only in what a thread does inside its block (its tile, the reduction splits, unroll
    depth, buffering) share it; () for a state without a multi-level tiling. `n_spatial_levels`:
    the GPU structure's (default: SketchParams')."""
    levels = n_spatial_levels or SketchParams().n_spatial_levels
    return tuple(r[4][1] for r in records if r[0] == SplitStep.TAG and len(r[4]) == levels - 1)


def as_records(steps: Iterable) -> Records:
    """Steps (records in any JSON-like form: lists or tuples, numpy or Python scalars) as the
    one form the search compares, nested tuples of Python values, so that a state read from a
    log or passed in by a caller is equal to the same state made by the search."""
    return tuple(_plain(r) for r in steps)


def _plain(v):
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    return v.item() if isinstance(v, np.generic) else v


__all__ = [
    "as_records",
    "block_shape",
    "in_turns",
    "launch_shape",
    "spread_over_sketches",
]
