"""Tests of guards.py: the per-stage loop bounds the guards share (`stage_bounds`)."""

from __future__ import annotations

import pytest

from autosched.lower.arith import MemoBounds
from autosched.lower.bound_inference import loop_bounds
from autosched.lower.emission import emit_program
from autosched.lower.guards import guards, stage_bounds
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


def all_guards(plan: LoweringPlan) -> list[tuple]:
    """The text of every computed stage's guards, spatial-only and not, in stage order."""
    out = []
    for i in computed_stages(plan):
        for spatial_only in (True, False):
            edges: list = []
            conds = guards(plan, i, spatial_only=spatial_only, edges=edges)
            out.append(tuple(repr(c) for c in conds + edges))
    return out


@pytest.mark.parametrize("name", sorted(STATES))
def test_stage_bounds_are_made_once_per_stage_with_its_loop_bounds(name):
    plan = emitted_plan(STATES[name]())
    for i in computed_stages(plan):
        got = stage_bounds(plan, i)
        assert isinstance(got, MemoBounds)
        assert stage_bounds(plan, i) is got
        keys = plan.info[i].context + [(i, it.name) for it in plan.stages[i].iters]
        assert dict(got) == loop_bounds(plan, keys)


@pytest.mark.parametrize("name", sorted(STATES))
def test_guards_under_the_shared_bounds_are_those_under_plain_bounds(name):
    """The remembered affine forms change no guard, on first use or on reuse."""
    plain = emitted_plan(STATES[name]())
    for i in computed_stages(plain):  # no memo: plain dicts in place of the MemoBounds
        plain.guard_bounds[i] = dict(stage_bounds(plain, i))  # type: ignore[assignment]
    shared = emitted_plan(STATES[name]())
    expected = all_guards(plain)
    if name == "ragged_matmul":
        assert any(expected), "the state has guards to compare"
    assert all_guards(shared) == expected
    assert all_guards(shared) == expected  # the memo filled by the first pass
