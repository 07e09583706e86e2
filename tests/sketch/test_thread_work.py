"""What a thread of a fuse-split-bind stage takes (sketch/thread_work.py): several vectors of a
large element-wise stage a block's width apart, unrolled; a pooling window's row read as one
vector. Sampled states compute the DAG on the CPU interpreter."""

from __future__ import annotations

import random

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.init_base import InitContext
from autosched.sketch.params import SketchParams
from autosched.sketch.thread_work import repeat_options, window_lanes
from measure.hardware import HardwareParams
from tests.interpreter_check import interpret_and_compare

# a GPU of one SM holding 256 threads: the small shapes below count as large stages
SMALL_GPU = HardwareParams(num_sms=1, max_threads_per_sm=256)


def bias_relu_mul(m: int, n: int) -> ComputeDAG:
    x, b = te.placeholder((m, n), name="x"), te.placeholder((n,), name="b")
    y = te.compute((m, n), lambda i, j: te.max(x[i, j] + b[j], 0.0) * x[i, j], name="y")
    return ComputeDAG([x, b, y])


def max_pool(n: int, c: int, h: int, w: int) -> ComputeDAG:
    x = te.placeholder((n, c, h, w), name="x")
    return ComputeDAG([x, topi.nn.max_pool2d(x, 2, 2)])


def repeats(state) -> int:
    """The extent of the output stage's unrolled loop (1: none)."""
    unrolled = [it.extent for it in state.stages[-1].iters if it.annotation == "unroll"]
    return unrolled[0] if unrolled else 1


def test_only_stages_that_fill_the_gpu_get_repeats():
    """1 alone (no draw) unless the repeats still leave every SM its threads and divide the
    loop with the block's width."""
    ctx = InitContext(SketchParams(), HardwareParams())
    assert repeat_options(ctx, 128, 32, 4) == (1,)
    assert repeat_options(ctx, 1 << 26, 256, 4) == (1, 2, 4)
    assert repeat_options(ctx, (1 << 26) + 4, 256, 4) == (1,)  # not divided
    off = InitContext(SketchParams(thread_repeats=(1,)), HardwareParams())
    assert repeat_options(off, 1 << 26, 256, 4) == (1,)


def test_an_element_wise_chain_may_give_each_thread_several_vectors():
    """relu(x + b) * x: states with 1, 2 and 4 float4 vectors a thread, the repeats an unrolled
    loop a block's width apart; every state computes the DAG."""
    dag = bias_relu_mul(16, 128)
    sampler = SketchSampler(generate_sketches(dag, SMALL_GPU), SMALL_GPU)
    states = sampler.sample(12, 0)
    assert {repeats(s) for s in states} == {1, 2, 4}, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        source = codegen_program(program)
        if repeats(state) > 1:
            assert f"< {repeats(state)}; ++" in source and "#pragma unroll" in source, source
        interpret_and_compare(dag, program)
    assert replay(dag, states[0].steps) == states[0]


def test_a_pooling_may_read_each_window_row_as_a_vector():
    """2 x 2 max pooling, stride 2: the window's columns (the innermost reduction loop) may be
    read as one float2, with or without several outputs a thread."""
    dag = max_pool(1, 4, 32, 32)
    sketches = generate_sketches(dag, SMALL_GPU)
    ctx = InitContext(SketchParams(), SMALL_GPU)
    assert window_lanes(ctx, dag.get_init_state(), len(dag.get_init_state().stages) - 1) == 2
    sampler = SketchSampler(sketches, SMALL_GPU)
    states = sampler.sample(16, random.Random(1))
    sources = {s.key(): codegen_program(sampler.programs[s.key()]) for s in states}
    vectors = [s for s in states if "float2 vec" in sources[s.key()]]
    assert vectors and len(vectors) < len(states), sampler.rejected
    assert {repeats(s) for s in vectors} > {1}
    for state in states:
        interpret_and_compare(dag, sampler.programs[state.key()])


def test_windows_that_are_not_2_or_4_wide_are_not_vectorised():
    x = te.placeholder((1, 2, 9, 9), name="x")
    dag = ComputeDAG([x, topi.nn.max_pool2d(x, 3, 3)])
    state = dag.get_init_state()
    ctx = InitContext(SketchParams(), SMALL_GPU)
    assert window_lanes(ctx, state, len(state.stages) - 1) == 1
