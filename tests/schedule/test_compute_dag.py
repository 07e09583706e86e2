"""ComputeDAG: exact FLOP counts, analysis flags, workload keys across processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import autosched
from autosched import te, topi
from autosched.errors import TEError
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.search_task import SearchTask
from autosched.task.workload_registry import register_workload
from autosched.task.workloads import SUITE


def test_flop_counts_are_exact():
    conv = autosched.SearchTask("conv2d_bias_relu", SUITE["conv2d_bias_relu"][1]).compute_dag
    out = 1 * 512 * 7 * 7
    assert (
        conv.flop_count == 2 * out * 512 * 9 + out + out
    )  # conv, bias add, relu (pad: no float ops)
    mm = autosched.SearchTask("matmul", (1024, 1024, 1024)).compute_dag
    assert mm.flop_count == 2 * 1024**3
    x = te.placeholder((1024, 1024), name="x")
    sm = ComputeDAG([x, topi.nn.softmax(x)])
    assert sm.flop_count == 5 * 1024 * 1024  # max, sub + exp, sum, divide


def test_analysis_flags():
    dag = autosched.SearchTask("conv2d_bias_relu", SUITE["conv2d_bias_relu"][1]).compute_dag
    info = {op.name: dag.op_info(op) for op in dag.ops}
    assert info["conv2d_nchw"].needs_multi_level_tiling and info["conv2d_nchw"].has_data_reuse
    assert info["pad_temp"].is_strictly_inlineable and info["T_add"].is_injective
    assert info["compute"].is_output and not info["compute"].is_strictly_inlineable
    assert info["data"].is_placeholder
    x = te.placeholder((64, 64), name="x")
    sm = ComputeDAG([x, topi.nn.softmax(x)])
    assert not sm.op_info(sm.op_by_name("T_softmax_maxelem")).needs_multi_level_tiling


def test_workload_key_recreates_the_same_dag_in_a_subprocess():
    task = autosched.SearchTask("conv2d_bias_relu", (1, 7, 7, 32, 16, 3, 3, 1, 1))
    code = (
        "import sys, autosched; t = autosched.SearchTask(workload_key=sys.argv[1]); "
        "print(t.compute_dag.canonical_text())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, task.workload_key], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == task.compute_dag.canonical_text().strip()
    assert json.loads(task.workload_key)[0] == "conv2d_bias_relu"


def test_unregistered_dag_gets_a_stable_hash_key():
    def build():
        a = te.placeholder((8, 8), name="a")
        return ComputeDAG([a, topi.relu(a)])

    assert build().workload_key == build().workload_key and build().workload_key.startswith("dag-")


# ---- bad input: one clear error ------------------------------------------------------------


def test_a_single_tensor_or_a_non_list_is_rejected():
    a = te.placeholder((4,), name="A")
    b = topi.relu(a)
    with pytest.raises(TEError, match="got the single tensor 'compute'; pass a list"):
        ComputeDAG(b)
    with pytest.raises(TEError, match="takes a list of tensors .* got int"):
        ComputeDAG(3)
    with pytest.raises(TEError, match="item 1 of the tensor list is str"):
        ComputeDAG([a, "B"])


@register_workload(name="test_compute_dag:one_tensor")
def one_tensor(n):
    a = te.placeholder((n,), name="A")
    return topi.relu(a)


def test_a_workload_returning_one_tensor_is_rejected():
    with pytest.raises(TEError, match="workload 'test_compute_dag:one_tensor' returned Tensor"):
        SearchTask(one_tensor, (4,))


def test_an_out_of_bounds_shifted_read_is_rejected():
    a = te.placeholder((4,), name="A")
    b = te.compute((4,), lambda i: a[i + 1], name="B")
    with pytest.raises(TEError) as err:
        ComputeDAG([a, b])
    assert "compute 'B' reads A[(i + 1)] with index range [1, 4] on axis 0 of extent 4" in str(
        err.value
    )


def test_a_reduction_longer_than_its_dimension_is_rejected():
    a = te.placeholder((8, 4), name="A")
    w = te.placeholder((5, 6), name="W")
    k = te.reduce_axis((0, 5), name="k")
    c = te.compute((8, 6), lambda i, j: te.sum(a[i, k] * w[k, j], axis=k), name="C")
    with pytest.raises(TEError, match=r"'C' reads A\[i, k\] with index range \[0, 4\] on axis 1"):
        ComputeDAG([a, w, c])


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 3), (1, (0, 2, 1, 0))])
def test_padded_convolutions_are_accepted(stride, padding):
    data = te.placeholder((1, 3, 9, 9), name="data")
    kernel = te.placeholder((4, 3, 7, 7), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1)
    dag = ComputeDAG([data, kernel, conv])
    assert [op.name for op in dag.ops] == ["data", "pad_temp", "kernel", "conv2d_nchw"]


@pytest.mark.parametrize("name", list(SUITE))
def test_every_suite_workload_builds(name):
    workload, full, small = SUITE[name]
    for args in (full, small):
        assert SearchTask(workload, args).compute_dag.ops
