"""Tests of guards.py: the ranges a stage's guards share (`StageRanges`, `stage_ranges`)."""

from __future__ import annotations

import pytest

from autosched.lower import guards as guards_module
from autosched.lower.bound_inference import loop_bounds
from autosched.lower.emission import emit_program
from autosched.lower.guards import guards, make_stage_ranges, stage_ranges
from autosched.lower.plan import LoweringPlan
from autosched.lower.planning import make_plan
from autosched.schedule.loop_state import State
from tests.lower.test_passes import conv_fetch_state
from tests.workloads_for_tests import matmul_dag, matmul_shared_state


def ragged_matmul_state() -> State:
    """A 7x6x5 matmul whose tiles overhang every extent: its stages are guarded."""
    tiles = {"i": (2, 2, 1, 1), "j": (1, 2, 1, 2), "k": (2, 1)}
    return matmul_shared_state(matmul_dag(7, 6, 5), tiles, (2, 1), unroll=0)


STATES = {"conv_fetch": conv_fetch_state, "ragged_matmul": ragged_matmul_state}


def emitted_plan(state: State) -> LoweringPlan:
    """The plan of `state` once its (single) kernel is emitted: the block extents are set."""
    plan = make_plan(state)
    emit_program(plan)
    return plan


def computed_stages(plan: LoweringPlan) -> list[int]:
    """The stages that compute something (not placeholders, not inlined)."""
    return [i for i, inf in enumerate(plan.info) if inf.body is not None]


def all_guards(plan: LoweringPlan) -> list[tuple[str, ...]]:
    """The text of every computed stage's guards, spatial-only and not, in stage order."""
    out = []
    for i in computed_stages(plan):
        for spatial_only in (True, False, True):
            edges: list = []
            conds = guards(plan, i, spatial_only=spatial_only, edges=edges)
            out.append(tuple(repr(c) for c in conds + edges))
    return out


@pytest.mark.parametrize("name", sorted(STATES))
def test_stage_ranges_are_made_once_per_stage_under_its_loop_bounds(name):
    plan = emitted_plan(STATES[name]())
    for i in computed_stages(plan):
        got = stage_ranges(plan, i)
        assert stage_ranges(plan, i) is got
        keys = plan.info[i].context + [(i, it.name) for it in plan.stages[i].iters]
        assert got.bounds == loop_bounds(plan, keys)


@pytest.mark.parametrize("name", sorted(STATES))
def test_guards_from_shared_ranges_are_those_from_fresh_ones(name, monkeypatch):
    """The ranges found by a stage's first guard give its later guards what fresh ones would."""
    shared = all_guards(emitted_plan(STATES[name]()))

    monkeypatch.setattr(guards_module, "stage_ranges", make_stage_ranges)
    expected = all_guards(emitted_plan(STATES[name]()))
    if name == "ragged_matmul":
        assert any(expected), "the state has guards to compare"
    assert shared == expected
