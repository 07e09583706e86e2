"""Launch bounds for one wave (sketch/launch_bounds.py `LaunchBounds`): a cross-thread
reduction's kernel whose grid fills the SMs more than once is drawn `launch_min_blocks` of 1 or
ceil(blocks / SMs), recorded as a pragma, replayed, printed in the Python schedule and in the
kernel's `__launch_bounds__`; the kernels still compute the DAG on the interpreter."""

from __future__ import annotations

import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import CLUSTER_RANK_TAG
from autosched.schedule.steps import PragmaStep, Step, print_python_schedule, replay
from autosched.search.mutations import is_decision, structure_key
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.launch_bounds import (
    cluster_blocks,
    fits_blocks,
    launch_shape,
    one_wave_blocks,
    unrolled_reduction_steps,
)
from autosched.sketch.params import SketchParams
from measure.hardware import HardwareParams
from tests.interpreter_check import interpret_and_compare

FOUR_SMS = HardwareParams(num_sms=4)  # 8 rows: two blocks per SM for one wave


def softmax(m: int, n: int) -> ComputeDAG:
    x = te.placeholder((m, n), name="x")
    return ComputeDAG([x, topi.softmax(x)])


def block_per_row(dag: ComputeDAG, hardware: HardwareParams, params=None):
    """The sampler of the sketches whose one kernel reduces each row with a block."""
    sketches = generate_sketches(dag, hardware, params=params)
    ones = [s for s in sketches if sum(st.compute_at == "root" for st in s.stages) == 2]
    return SketchSampler(ones, hardware, params=params)


def min_blocks(state) -> list[int]:
    return [st.launch_min_blocks for st in state.stages if st.launch_min_blocks > 1]


def test_a_softmax_of_a_few_rows_per_sm_is_drawn_one_wave_or_not():
    dag = softmax(8, 256)
    sampler = block_per_row(dag, FOUR_SMS)
    states = sampler.sample(8, 0)
    assert len(states) == 8, sampler.rejected
    drawn = {tuple(min_blocks(s)) for s in states}
    assert drawn == {(), (2,)}  # even odds: both come up in 8 draws
    for state in states:
        program = sampler.programs[state.key()]
        (kernel,) = program.kernels
        wanted = max(min_blocks(state), default=1)
        assert kernel.min_blocks_per_sm == wanted
        threads = kernel.threads_per_block
        assert f"__launch_bounds__({threads}, {wanted})" in codegen_program(program)
        interpret_and_compare(dag, program, rtol=1e-4)
        text = print_python_schedule(state)
        # every such kernel carries the pragma, 1 or 2: one sketch, either decision
        assert f'"launch_min_blocks", {wanted})' in text
        assert replay(dag, state.steps) == state
    keys = {structure_key(tuple(s.to_record() for s in st.steps)) for st in states}
    assert len(keys) < len(states)  # the two decisions of one sketch share its structure


def test_grids_that_fit_one_wave_or_never_can_are_left_alone():
    """8 rows on 8 SMs are one wave already; on one SM they need 8 blocks of the SM, more
    threads than it holds for blocks of 512 (and 1024) threads."""
    dag = softmax(8, 256)
    for state in block_per_row(dag, HardwareParams(num_sms=8)).sample(4, 0):
        assert not min_blocks(state)
    one_sm = HardwareParams(num_sms=1)
    for state in block_per_row(dag, one_sm).sample(6, 1):
        blocks, threads = launch_shape(state, len(state.stages) - 1)
        assert blocks == 8
        expected = 8 if 8 * threads <= one_sm.max_threads_per_sm else 1
        assert one_wave_blocks(state, len(state.stages) - 1, one_sm) in (expected, 1)
        assert max(min_blocks(state), default=1) in (1, expected)


def test_switched_off_no_kernel_asks_for_more_than_one_block():
    params = SketchParams(one_wave_launch_bounds=False)
    states = block_per_row(softmax(8, 256), FOUR_SMS, params).sample(6, 0)
    assert states and not any(min_blocks(s) for s in states)


@pytest.mark.parametrize("pragma", ["launch_min_blocks$2", "launch_min_blocks$1"])
def test_the_pragma_record_round_trips(pragma):
    step = PragmaStep(3, 0, pragma)
    assert Step.from_record(step.to_record()) == step
    assert not is_decision(step.to_record())  # the unroll mutation leaves it alone


def test_a_pragma_asking_for_no_block_is_refused():
    dag = softmax(2, 64)
    state = dag.get_init_state()
    last = len(state.stages) - 1
    with pytest.raises(Exception, match="launch_min_blocks must be 1 or more"):
        state.pragma(last, 0, "launch_min_blocks", 0)


def test_a_cluster_kernel_too_large_for_one_wave_is_drawn_the_most_blocks_that_fit():
    """Softmax rows over clusters of 4 with each block's part in registers: where 16 blocks on
    two SMs cannot be resident at once the one-wave count is not offered; the most blocks
    per SM whose register cap still holds the part (and 1) are, and print in the launch
    bounds. The rank is no loop: a thread's reduction steps are its part's, not C times."""
    dag = softmax(4, 16384)
    two_sms = HardwareParams(num_sms=2)
    params = SketchParams(row_cluster_sizes=(4,))
    sketches = [
        s
        for s in generate_sketches(dag, two_sms, params)
        if any(st.name == "x.local" for st in s.stages)
        and any(it.annotation == CLUSTER_RANK_TAG for st in s.stages for it in st.iters)
        and not any(st.stream_reads for st in s.stages)
    ]
    sampler = SketchSampler(sketches, two_sms, params)
    states = sampler.sample(8, 0)
    assert len(states) == 8, sampler.rejected
    drawn = set()
    for state in states:
        root = len(state.stages) - 1
        blocks, threads = launch_shape(state, root)
        assert blocks == 16 and unrolled_reduction_steps(state, root) <= 16384 // 4 // threads
        if one_wave_blocks(state, root, two_sms) > 1:
            continue  # small blocks: the whole grid fits

        most = cluster_blocks(state, root, two_sms)
        assert most * threads <= two_sms.max_threads_per_sm
        assert not fits_blocks(state, root, two_sms, most + 1)
        wanted = max(min_blocks(state), default=1)
        assert wanted in (1, most)
        drawn.add(wanted)
        program = sampler.programs[state.key()]
        assert f"__launch_bounds__({threads}, {wanted})" in codegen_program(program)
        interpret_and_compare(dag, program, rtol=1e-4)
    assert len(drawn) > 1
