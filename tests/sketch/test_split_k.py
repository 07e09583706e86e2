"""Split-K (sketch/rules.py `SplitKReduction`): a reduction with a small output and a long
reduction is also sketched as partial sums over P parts (rfactor) plus a kernel that adds them;
sampled states lower to two kernels (the sum of the parts inside an element-wise
consumer where there is one) and compute the DAG on the CPU interpreter. Half-precision
products split on their Tensor Core K axis, their partial sums on the Tensor Cores."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

import autosched
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import RfactorStep, print_python_schedule
from autosched.search.program_measurer import task_reference
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from autosched.task.search_task import SearchTask
from autosched.task.workload_registry import make_workload_key, workload_tensors
from autosched.task.workloads import SUITE
from tests.interpreter_check import assert_half_outputs_match, half_inputs, lower_and_compare
from tests.workloads_for_tests import matmul_dag


def split_parts(sketch) -> int | None:
    """P of a split-K sketch (the extent of its rf stage's first axis), None for the others."""
    rf = [st for st in sketch.stages if st.op.name.endswith(".rf")]
    return rf[0].op.axis[0].extent if rf else None


def test_small_outputs_with_long_reductions_get_split_sketches():
    sketches = generate_sketches(matmul_dag(16, 16, 4096))
    assert sorted(p for p in map(split_parts, sketches) if p) == [4, 16]
    assert None in map(split_parts, sketches)  # the unsplit ones are kept
    split = next(s for s in sketches if split_parts(s) == 16)
    names = [st.name for st in split.stages]
    assert {"A.shared", "B.shared", "C.rf.local", "C.rf", "C"} <= set(names)  # rf tiled


def test_large_outputs_and_short_reductions_are_not_split():
    assert not any(map(split_parts, generate_sketches(matmul_dag(512, 128, 4096))))
    assert any(map(split_parts, generate_sketches(matmul_dag(256, 128, 4096))))
    assert not any(map(split_parts, generate_sketches(matmul_dag(16, 16, 512))))
    # parts that would leave chunks under the minimum (256) are not sketched
    few = generate_sketches(matmul_dag(16, 16, 2048))
    assert sorted(p for p in map(split_parts, few) if p) == [4]


def test_split_states_compute_the_matmul_in_two_kernels():
    dag, params = matmul_dag(8, 16, 1024), SketchParams(split_k_min_chunk=64)
    split = [s for s in generate_sketches(dag, params=params) if split_parts(s)]
    sampler = SketchSampler(split, params=params)
    states = sampler.sample(2, 0)
    assert states
    for state in states:
        program = sampler.programs[state.key()]
        assert len(program.kernels) == 2 and [b.name for b in program.temps] == ["C_rf"]
        lower_and_compare(dag, state, rtol=1e-3)
    text = print_python_schedule(states[0])
    assert "s.rfactor(" in text and any(isinstance(s, RfactorStep) for s in states[0].steps)


def test_split_conv2d_bias_relu_states_compute_the_layer():
    """The seed's layer shape, smaller (32 input channels): three reduction axes fused and cut
    in parts, the partial sums added by a second kernel that also applies bias + relu (the sum
    computed inside the epilogue's loop, in a register: no third kernel, one scratch buffer)."""
    workload, _, _ = SUITE["conv2d_bias_relu"]
    dag = SearchTask(workload, (1, 7, 7, 64, 32, 3, 3, 1, 1)).compute_dag
    params = SketchParams(split_k_min_chunk=64, split_k_outer_axis=False)
    split = [s for s in generate_sketches(dag, params=params) if split_parts(s)]
    assert sorted(map(split_parts, split)) == [4]  # 576 products: 16 parts would hold 36
    sampler = SketchSampler(split, params=params)
    states = sampler.sample(3, 0)
    assert states
    for state in states:
        program = sampler.programs[state.key()]
        assert len(program.kernels) == 2
        assert [b.name for b in program.temps] == ["conv2d_nchw_rf"]
        lower_and_compare(dag, state, rtol=1e-3)


def rf_reduce_axes(sketch) -> list[str]:
    """The reduction axes of the stage that computes the partial sums (after the sketch's cache
    write, its local stage)."""
    (rf,) = [st for st in sketch.stages if ".rf" in st.op.name and st.op.reduce_axis]
    return [ax.name for ax in rf.op.reduce_axis]


def test_cutting_the_outer_axis_keeps_the_window_axes():
    """With split_k_outer_axis (the default), the input channels alone are cut (where the
    parts divide them): the partial sums reduce over the rest of the channels and the whole
    window, and compute the layer; where the parts do not divide them, the axes are fused."""
    workload, _, _ = SUITE["conv2d_bias_relu"]
    dag = SearchTask(workload, (1, 7, 7, 64, 32, 3, 3, 1, 1)).compute_dag
    outer = SketchParams(split_k_min_chunk=8)  # split_k_outer_axis is the default
    split = {split_parts(s): s for s in generate_sketches(dag, params=outer) if split_parts(s)}
    assert sorted(split) == [4, 16]
    # a part: 2 of the 32 input channels (rc_i) by the whole 3 x 3 window
    assert sorted(rf_reduce_axes(split[16])) == ["rc_i", "rx", "ry"]
    fused = SketchParams(split_k_min_chunk=8, split_k_outer_axis=False)
    (fused_16,) = [s for s in generate_sketches(dag, params=fused) if split_parts(s) == 16]
    assert len(rf_reduce_axes(fused_16)) == 1
    sampler = SketchSampler([split[16]], params=outer)
    for state in sampler.sample(3, 0):
        lower_and_compare(dag, state, rtol=1e-3)
    # 24 input channels: 16 parts do not divide them, so that sketch fuses the axes
    odd = SearchTask(workload, (1, 7, 7, 64, 24, 3, 3, 1, 1)).compute_dag
    by_parts = {split_parts(s): s for s in generate_sketches(odd, params=outer) if split_parts(s)}
    assert sorted(rf_reduce_axes(by_parts[4])) == ["rc_i", "rx", "ry"]
    assert len(rf_reduce_axes(by_parts[16])) == 1


def test_the_reference_is_the_same_for_every_number_of_parts():
    # The measurer makes one reference per task from the first candidate it builds. A split
    # candidate's partial sums (C_rf, P x 16 x 16) are scratch, not an input: with them in the
    # reference, every candidate of the other P failed as an instantiation error.
    dag = matmul_dag(16, 16, 4096)
    args = {}
    for sketch in generate_sketches(dag):
        if split_parts(sketch):
            state = SketchSampler([sketch]).sample(1, 0)[0]
            args[split_parts(sketch)] = autosched.build(dag, state).args
    temps = {p: [a.shape for a in got if a.name == "C_rf"] for p, got in args.items()}
    assert temps == {4: [(4, 16, 16)], 16: [(16, 16, 16)]}
    task = SimpleNamespace(compute_dag=dag)
    refs = {p: task_reference(task, got) for p, got in args.items()}
    assert set(refs[4].inputs) == set(refs[16].inputs) == {"A", "B"}
    for name in ("A", "B"):
        np.testing.assert_array_equal(refs[4].inputs[name], refs[16].inputs[name])
    np.testing.assert_array_equal(refs[4].outputs["C"], refs[16].outputs["C"])


def split_programs(dag, params, count=3, seed=0):
    """(state, program) of `count` sampled states of `dag`'s split-K sketches."""
    split = [s for s in generate_sketches(dag, params=params) if split_parts(s)]
    assert split
    sampler = SketchSampler(split, params=params)
    states = sampler.sample(count, seed)
    assert states
    return [(state, sampler.programs[state.key()]) for state in states]


def test_a_dense_layers_bias_is_added_where_the_parts_are_summed():
    """dense + bias, 8 x 1024 -> 16: the parts are added inside the bias stage's loop, so the
    program is the partial-sum kernel and one kernel that sums and adds the bias."""
    workload, _, _ = SUITE["dense_bias"]
    dag = SearchTask(workload, (8, 1024, 16)).compute_dag
    for state, program in split_programs(dag, SketchParams(split_k_min_chunk=64)):
        assert len(program.kernels) == 2
        assert [b.name for b in program.temps] == ["T_dense_rf"]
        lower_and_compare(dag, state, rtol=1e-3)


def test_a_consumer_that_reads_across_elements_keeps_its_own_kernel():
    """A transpose of the split product is not element-wise matched: the parts are summed by
    a kernel of their own, and the transpose reads the sums from global memory."""
    from autosched import te
    from autosched.schedule.compute_dag import ComputeDAG

    a = te.placeholder((8, 1024), name="A")
    b = te.placeholder((1024, 16), name="B")
    rk = te.reduce_axis((0, 1024), name="k")
    c = te.compute((8, 16), lambda i, j: te.sum(a[i, rk] * b[rk, j], axis=[rk]), name="C")
    t = te.compute((16, 8), lambda j, i: c[i, j], name="T")
    dag = ComputeDAG([a, b, t])
    for state, program in split_programs(dag, SketchParams(split_k_min_chunk=64), count=2):
        assert len(program.kernels) == 3
        assert [buf.name for buf in program.temps] == ["C_rf", "C"]
        lower_and_compare(dag, state, rtol=1e-3)


def half_split_states(
    workload: str, args: tuple, count: int = 2, params: SketchParams | None = None
):
    """(dag, sampler, states) of a half-precision workload's split-K Tensor Core sketches
    (`params` default: parts of 64 or more)."""
    dag = ComputeDAG(workload_tensors(make_workload_key(workload, args)))
    params = params or SketchParams(split_k_min_chunk=64)
    split = [
        s
        for s in generate_sketches(dag, params=params)
        if split_parts(s) and any(st.scope == "wmma.accumulator" for st in s.stages)
    ]
    assert split
    sampler = SketchSampler(split, params=params)
    states = sampler.sample(count, 0)
    assert len(states) == count, sampler.rejected
    return dag, sampler, states


def check_half(dag, sampler, states) -> None:
    inputs = half_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    for state in states:
        assert_half_outputs_match(dag, sampler.programs[state.key()], inputs, expected)


def test_a_half_precision_matmul_splits_on_tensor_cores():
    """Few output tiles (24 x 40, padded) and a long K: the partial sums are a Tensor Core
    product whose K tiles start at their part's offset."""
    dag, sampler, states = half_split_states("matmul_fp16", (24, 40, 1024))
    for state in states:
        program = sampler.programs[state.key()]
        assert len(program.kernels) == 2 and [b.name for b in program.temps] == ["T_matmul_rf"]
    check_half(dag, sampler, states)


def test_a_half_precision_conv_splits_its_input_channels_on_tensor_cores():
    """Batch 1, 4 x 4 pixels, 128 input channels: the input channels (the implicit GEMM's K)
    are cut, the window kept whole in each part."""
    dag, sampler, states = half_split_states("conv2d_nhwc_fp16", (1, 4, 4, 16, 128, 3, 3, 1, 1))
    for state in states:
        assert sorted(rf_reduce_axes(state)) == ["rc_i", "rx", "ry"]
    check_half(dag, sampler, states)
