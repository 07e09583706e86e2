"""The validity checks that run before a candidate is lowered (`validity.check_state` on the
State, `validity.check_plan` on its lowering plan) refuse only candidates that lowering would
refuse too, and refuse them without emitting code."""

from __future__ import annotations

import dataclasses
import random

import pytest

from autosched.lower.lowering import lower
from autosched.lower.planning import make_plan
from autosched.schedule.stage import ROOT
from autosched.sketch import SketchParams, SketchSampler, generate_sketches, validity
from autosched.sketch.validity import (
    Reason,
    check_candidate,
    check_program,
    check_state,
    plan_local_elems,
    plan_shared_bytes,
    root_threads,
)
from measure.hardware import HardwareParams
from tests.workloads_for_tests import conv2d_bias_relu_dag

HARDWARE = HardwareParams()


@pytest.fixture(scope="module")
def states():
    """Valid states of a small conv2d + bias + relu, from every sketch."""
    dag = conv2d_bias_relu_dag(co=16, ci=8)
    sampler = SketchSampler(generate_sketches(dag, HARDWARE), HARDWARE)
    out = sampler.sample(8, random.Random(0))
    assert len(out) == 8
    return out


def _roots(state):
    return [s for s in state.stages if s.compute_at == ROOT and not s.is_placeholder]


def test_a_root_stage_asks_its_kernel_for_no_more_threads_than_the_kernel_launches(states):
    for state in states:
        program = lower(state)
        assert len(program.kernels) == len(_roots(state))
        for kernel, stage in zip(program.kernels, _roots(state), strict=True):
            assert 1 < root_threads(stage) <= kernel.threads_per_block


def test_a_plan_holds_no_more_shared_bytes_or_local_elements_than_its_lowered_kernels(states):
    for state in states:
        plan = make_plan(state)
        program = lower(state)
        for kernel, root in zip(program.kernels, plan.kernel_roots(), strict=True):
            local = sum(b.size for b in kernel.allocs if b.scope == "local")
            assert plan_local_elems(plan, root) <= local
            assert plan_shared_bytes(plan, root) <= kernel.shared_bytes


def _fail(*_args, **_kwargs):
    raise AssertionError("a candidate refused before lowering was lowered")


def test_too_many_threads_are_refused_on_the_state_before_planning(states, monkeypatch):
    state = states[0]
    threads = max(root_threads(s) for s in _roots(state))
    fewer = dataclasses.replace(HARDWARE, max_threads_per_block=threads - 1)
    assert check_state(state, HARDWARE) is None
    assert check_state(state, fewer) == Reason.THREADS_PER_BLOCK
    assert check_program(lower(state), fewer, SketchParams()) == Reason.THREADS_PER_BLOCK
    monkeypatch.setattr(validity, "make_plan", _fail)
    assert check_candidate(state, fewer, SketchParams()) == (None, "threads_per_block")


def _most_local_elems(state) -> int:
    plan = make_plan(state)
    return max(plan_local_elems(plan, root) for root in plan.kernel_roots())


def test_too_many_local_elements_are_refused_on_the_plan_before_emission(states, monkeypatch):
    state = max(states, key=_most_local_elems)
    most = _most_local_elems(state)
    assert most >= 1
    params = dataclasses.replace(SketchParams(), max_local_elems=most - 1)
    assert check_candidate(state, HARDWARE, SketchParams())[1] is None
    assert check_program(lower(state), HARDWARE, params) == Reason.LOCAL_MEMORY
    monkeypatch.setattr(validity, "lower_plan", _fail)
    assert check_candidate(state, HARDWARE, params) == (None, "local_memory")


def test_too_many_shared_bytes_are_refused_on_the_plan_before_emission(states, monkeypatch):
    def most(state) -> int:
        plan = make_plan(state)
        return max(plan_shared_bytes(plan, root) for root in plan.kernel_roots())

    state = max(states, key=most)
    assert most(state) > 0
    smaller = dataclasses.replace(HARDWARE, max_shared_memory_per_block_optin=most(state) - 1)
    assert check_program(lower(state), smaller, SketchParams()) == Reason.SHARED_MEMORY
    monkeypatch.setattr(validity, "lower_plan", _fail)
    assert check_candidate(state, smaller, SketchParams()) == (None, "shared_memory")
