"""A layer norm's statistics in one pass over its rows (topi.layer_norm(moments=True)): the
moments' axis of 2 moved inside the reduction loop by CrossThreadReduction
(`outputs_inside_steps`), so each thread adds both moments at every step it reads, and the
vector reads of a row serve both (codegen/vectors.py reads a load under a Select from the same
elements' unguarded vector). Sampled states compute the layer norm on the CPU interpreter."""

from __future__ import annotations

import re

import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import REDUCE
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.rules import CrossThreadReduction
from tests.interpreter_check import interpret_and_compare

MOMENTS = "T_layer_norm_moments"


def layer_norm(m: int, n: int, moments: bool) -> ComputeDAG:
    x = te.placeholder((m, n), name="x")
    g, b = te.placeholder((n,), name="gamma"), te.placeholder((n,), name="beta")
    return ComputeDAG([x, g, b, topi.layer_norm(x, g, b, moments=moments)])


def one_pass(sketch) -> bool:
    """Is the moments stage computed at a row with its moments axis inside its reduction?"""
    its = [it for it in sketch[MOMENTS].iters]
    first_reduce = next(k for k, it in enumerate(its) if it.kind == REDUCE)
    moments_axis = next(k for k, it in enumerate(its) if it.name.endswith("i1"))
    return sketch[MOMENTS].attach is not None and first_reduce < moments_axis


def cut(sketch) -> bool:
    """Is the sketch's reduction cut into parts over several blocks (test_cross_block.py)?"""
    return any(st.origin == "rfactor" for st in sketch.stages)


def test_the_moments_of_a_row_are_summed_in_one_pass_and_compute_the_layer_norm():
    dag = layer_norm(2, 256, moments=True)
    rows = [s for s in generate_sketches(dag) if s[MOMENTS].attach is not None and not cut(s)]
    assert rows and all(map(one_pass, rows))  # every block-per-row sketch reads its row once
    # (the rows kept in registers, whose moments read the cache: test_row_in_registers.py)
    sampler = SketchSampler([s for s in rows if all(st.scope != "local" for st in s.stages)])
    states = sampler.sample(4, 0)
    assert len(states) == 4, sampler.rejected
    vectors = 0
    for state in states:
        program = sampler.programs[state.key()]
        assert len(program.kernels) == 1
        source = codegen_program(program)
        if "float4 vec" in source:  # x and x * x from the same 16-byte read
            vectors += 1
            assert re.search(r"== 1\) \? vec(_\d+)?\.x", source), source
        interpret_and_compare(dag, program, rtol=1e-4)
    assert vectors


@pytest.mark.parametrize("moments", [False, True])
def test_only_a_few_outputs_the_consumer_does_not_share_move_inside_the_steps(moments):
    """The centred layer norm's mean and variance (one output per row, all shared with the
    consumer) keep their loop order; so does a reduction with more outputs per row than a
    thread keeps in registers."""
    state = layer_norm(2, 256, moments).get_init_state()
    stage = MOMENTS if moments else "T_layer_norm_mean"
    moved = CrossThreadReduction.outputs_inside_steps(state, state.stage_index(stage), 1)
    assert (moved is not state) == moments
    x = te.placeholder((2, 256), name="x")
    k = te.reduce_axis((0, 256), name="k")
    wide = te.compute(
        (2, 8), lambda i, c: te.sum(x[i, k] * te.cast(c, "float32"), axis=k), name="wide"
    )
    state = ComputeDAG([x, wide]).get_init_state()
    assert CrossThreadReduction.outputs_inside_steps(state, 1, 1) is state
