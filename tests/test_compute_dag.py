"""ComputeDAG: exact FLOP counts, analysis flags, workload keys across processes."""

from __future__ import annotations

import json
import subprocess
import sys

import autosched
from autosched import te, topi
from autosched.schedule.compute_dag import ComputeDAG
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
