"""benchmarks/memory_bound.py without a GPU: each row's tensor expression against its PyTorch
equivalent (on the CPU, at the row's small size), which rows --quick runs, and the table."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from autosched.schedule.stage import CLUSTER_RANK_TAG
from autosched.sketch import SketchParams, generate_sketches
from autosched.task.evaluate import evaluate
from benchmarks.memory_bound import (
    WORKLOADS,
    memory_bound_results,
    row,
    selected,
    sketch_params_of,
    task_of,
)

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_each_row_computes_what_its_pytorch_function_computes(name):
    dag = task_of(name, small=True).compute_dag
    rng = np.random.default_rng(0)
    inputs = [t for t in dag.tensors if not any(t.op is op for op in dag.outputs)]
    arrays = {t.name: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in inputs}
    (out,) = [t for t in dag.tensors if any(t.op is op for op in dag.outputs)]
    ours = evaluate(dag, arrays)[out.op.name]
    w = WORKLOADS[name]
    theirs = w.torch_fn(w.small)(*(torch.from_numpy(arrays[t.name]) for t in inputs))
    assert tuple(theirs.shape) == tuple(out.shape) and str(theirs.dtype) == f"torch.{out.dtype}"
    half = out.dtype == "float16"
    np.testing.assert_allclose(
        ours.astype(np.float32), theirs.float().numpy(), rtol=1e-2 if half else 1e-4, atol=1e-3
    )


def test_quick_runs_six_rows_and_workloads_override_it():
    quick = selected(argparse.Namespace(workloads=None, quick=True))
    assert len(quick) == 6 and set(quick) < set(WORKLOADS)
    assert selected(argparse.Namespace(workloads=None, quick=False)) == list(WORKLOADS)
    picked = ["gemv_fp16_4096x4096"]
    assert selected(argparse.Namespace(workloads=picked, quick=True)) == picked
    sizes = [task_of(n).compute_dag for n in WORKLOADS]
    from autosched.roofline import dag_bytes

    moved = [dag_bytes(d) for d in sizes]
    assert min(moved) <= 2 << 20 and max(moved) >= 256 << 20  # from 1 MB to 256 MB and more


def test_row_clusters_add_the_cluster_sketches_of_long_rows():
    task = task_of("softmax_256x32768")

    def cluster_sizes(row_clusters: list[int]) -> set[int]:
        ns = argparse.Namespace(row_clusters=row_clusters, single_pass=None, interleave_bytes=None)
        params = sketch_params_of(task, ns)
        sketches = generate_sketches(task.compute_dag, task.hardware_params, params)
        its = [it for s in sketches for st in s.stages for it in st.iters]
        return {it.extent for it in its if it.annotation == CLUSTER_RANK_TAG}

    assert cluster_sizes([]) == set()
    assert cluster_sizes([2, 4, 8]) == {2, 4, 8}


def test_single_pass_sets_the_odds_of_one_kernel_for_cross_block_reductions():
    task = task_of("norm2_4096x4096")
    for odds in (None, 0.0, 1.0):
        ns = argparse.Namespace(row_clusters=None, single_pass=odds, interleave_bytes=None)
        want = SketchParams().cross_block_single_pass if odds is None else odds
        assert sketch_params_of(task, ns).cross_block_single_pass == want


def test_interleave_bytes_sets_the_chunk_of_interleaved_parts():
    task = task_of("norm2_4096x4096")
    for chunk in (None, 0, 4096):
        ns = argparse.Namespace(row_clusters=None, single_pass=None, interleave_bytes=chunk)
        want = SketchParams().cross_block_interleave_bytes if chunk is None else chunk
        assert sketch_params_of(task, ns).cross_block_interleave_bytes == want


def _run(name: str, ours_us: float, commit: str = "abc1234") -> dict:
    return {
        "name": name,
        "bytes": 32 << 20,
        "ours_us": ours_us,
        "eager_us": 12.4,
        "compile_us": 11.0,
        "copy_us": 8.5,
        "record_us": 9.5,
        "trials": 64,
        "matches_torch": True,
        "machine": "NVIDIA H200",
        "commit": commit,
        "command": "python -m benchmarks.memory_bound --quick",
        "peak_bandwidth": 4.2e12,
    }


def test_table_gives_bandwidth_and_share_of_peak():
    run = _run("gemv_fp16_4096x4096", 10.0)
    # 33.55 MB in 10 us: 3355 GB/s, 80% of 4200; eager 12.4 us: 64%; compiled 11.0 us: 73%
    assert row(run) == [
        "gemv_fp16_4096x4096",
        32.0,
        10.0,
        12.4,
        11.0,
        pytest.approx(3355.4432),
        pytest.approx(79.89, abs=0.01),
        "8.5",
        "85",
        "64 / 73",
        pytest.approx(1.1),
        64,
        True,
    ]
    results = memory_bound_results([run, _run("norm2_4096x4096", 20.0, commit="def5678")])
    assert [t.commit for t in results.tables] == ["abc1234", "def5678"]
    text = results.tables[0].markdown()
    assert "GB/s against a 4200 GB/s peak" in text
    assert (
        "| gemv_fp16_4096x4096 | 32.0 | 10.0 | 12.4 | 11.0 | 3355 | 80 | 8.5 | 85 | 64 / 73 "
        "| 1.10 |" in text
    )


def test_a_run_without_a_copy_reading_shows_dashes():
    run = _run("norm2_4096x4096", 20.0)
    del run["copy_us"]
    assert row(run)[7:9] == ["-", "-"]
