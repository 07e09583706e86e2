"""autosched.roofline: bytes a task must move, peaks per GPU, and the roofline line."""

from __future__ import annotations

import pytest

from autosched import te
from autosched.roofline import PEAKS, Roofline, dag_bytes, peak_for
from autosched.schedule.compute_dag import ComputeDAG


def gemv_fp16(n: int, k: int) -> ComputeDAG:
    w = te.placeholder((n, k), name="W", dtype="float16")
    x = te.placeholder((k,), name="x", dtype="float16")
    r = te.reduce_axis((0, k), name="k")
    y = te.compute(
        (n,),
        lambda i: te.sum(te.cast(w[i, r], "float32") * te.cast(x[r], "float32"), axis=r),
        name="y",
    )
    return ComputeDAG([w, x, y])


def test_bytes_are_each_input_read_once_and_each_output_written_once():
    # W: 4096 x 4096 halves, x: 4096 halves, y: 4096 floats
    assert dag_bytes(gemv_fp16(4096, 4096)) == 4096 * 4096 * 2 + 4096 * 2 + 4096 * 4
    a = te.placeholder((64, 64), name="A")
    b = te.compute((64, 64), lambda i, j: a[i, j] + 1.0, name="B")
    c = te.compute((64, 64), lambda i, j: b[i, j] * 2.0, name="C")
    assert dag_bytes(ComputeDAG([a, c])) == 2 * 64 * 64 * 4  # B is not counted


def test_peaks_by_device_name_with_overrides():
    assert peak_for("NVIDIA H200").bandwidth == 4.2e12
    assert peak_for("NVIDIA H100 80GB HBM3") == PEAKS["H100"]
    assert peak_for(None).name == "H100"  # the default
    assert peak_for("H200", bandwidth=4.0e12).bandwidth == 4.0e12
    assert peak_for("H200", fp32=None).fp32 == 67e12
    with pytest.raises(ValueError, match="unknown peaks"):
        peak_for("H200", bandwith=1.0)


def test_a_matrix_vector_product_is_memory_bound_and_says_so():
    dag = gemv_fp16(4096, 4096)
    line = Roofline.of(dag, 10e-6, peak_for("H200")).line()
    # 33.6 MB in 10 us: 3.36 TB/s, 80% of 4.2 TB/s; 2 x 16.8 M FLOP in 10 us
    assert line.startswith("roofline (H200, memory-bound): 3358 GB/s = 80% of 4200 GB/s; ")
    assert "of fp32 67 TFLOP/s" in line


def test_a_large_matrix_product_is_compute_bound():
    a, b = te.placeholder((4096, 4096), name="A"), te.placeholder((4096, 4096), name="B")
    k = te.reduce_axis((0, 4096), name="k")
    c = te.compute((4096, 4096), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    roofline = Roofline.of(ComputeDAG([a, b, c]), 5e-3, peak_for("H100"), tensor_core=True)
    assert not roofline.memory_bound
    assert "compute-bound" in roofline.line() and "fp16 Tensor Core 989 TFLOP/s" in roofline.line()
