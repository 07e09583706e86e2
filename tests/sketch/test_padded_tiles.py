"""Extents with few divisors (1023, 999, 97) are also tiled as their next multiple of 32: the
sampler draws such overhanging tiles, lowering guards them, and the programs stay exact."""

from __future__ import annotations

import random

import numpy as np

from autosched.schedule.steps import SplitStep
from autosched.search.mutations import TileSizeMutation
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import tiling_extents
from autosched.task.evaluate import evaluate
from tests.interpreter_check import assert_matches_dag, random_inputs
from tests.workloads_for_tests import matmul_dag


def test_tiling_extents_pad_awkward_extents_only():
    assert tiling_extents(1023) == (1023, 1024)
    assert tiling_extents(999) == (999, 1024)
    assert tiling_extents(1024) == (1024,)
    assert tiling_extents(27) == (27,)  # small extents keep their own divisors
    assert tiling_extents(64) == (64,)


def _padded_splits(state) -> list[SplitStep]:
    return [
        s
        for s in state.steps
        if isinstance(s, SplitStep) and None not in s.lengths and s.extent % np.prod(s.lengths)
    ]


def test_sampled_states_with_overhanging_tiles_compute_the_dag():
    """A 97 x 99 x 24 matmul: both spatial extents are prime-ish; sampled states use padded
    tilings (tiles that do not divide the extent) and match numpy on the interpreter."""
    dag = matmul_dag(97, 99, 24)
    sampler = SketchSampler(generate_sketches(dag))
    states = sampler.sample(12, 0)
    padded = [s for s in states if _padded_splits(s)]
    assert padded, "no sampled state tiles a padded extent"
    inputs = random_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    for s in padded[:4]:
        assert_matches_dag(dag, sampler.programs[s.key()], s, inputs, expected)


def test_tile_size_mutation_keeps_a_padded_tiling_covering_the_extent():
    """Moving factors between the levels of a padded split keeps the padded product, so the
    tiles still cover the extent."""
    step = SplitStep(0, 0, 1023, (4, 8, 2), True)
    levels = TileSizeMutation.levels(step)
    assert levels == [16, 4, 8, 2] and np.prod(levels) == 1024
    rng = random.Random(0)
    for _ in range(20):
        moved = TileSizeMutation.move_factor(levels, 64, rng)
        assert moved is not None and np.prod(moved) == 1024
        assert moved[0] * np.prod(moved[1:]) >= step.extent
