"""topi.nn.conv2d_transpose_nchw (topi/conv_transpose.py): values against the numpy reference
for strides, paddings and output paddings; reads provably in bounds; a reduction over only the
taps that land on each output pixel (its FLOP count); sampled schedules on the CPU interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from autosched import te, topi
from autosched.schedule.compute_dag import ComputeDAG
from autosched.sketch import SketchSampler, generate_sketches
from autosched.task.evaluate import evaluate, evaluate_ops
from autosched.te.bounds import Domain, span
from autosched.te.expr import Load
from autosched.te.visitor import walk
from autosched.topi import testing as ref
from tests.interpreter_check import assert_matches_dag, random_inputs

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, size=shape).astype("float32")


def run(out: te.Tensor, **arrays: np.ndarray) -> np.ndarray:
    """Evaluate `out` after building its DAG (which proves every read in bounds)."""
    ComputeDAG([out])
    return evaluate_ops(out, arrays)[out.op]


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


CONV2D_TRANSPOSE_CASES = [  # (stride, padding, output_padding, kernel (KH, KW))
    (1, 0, 0, 3),
    (2, 1, 0, 3),
    (2, 1, 1, 3),
    (3, (0, 1), (2, 0), 4),
    (1, 2, 0, 3),
    (2, 0, 0, 2),
    (2, 1, 1, 4),
    (3, 0, 0, 3),
    (3, 2, 2, 5),
    (3, (2, 0, 1, 1), 1, (3, 2)),
    ((2, 3), (1, 2), (1, 2), (4, 3)),
    (4, 1, 3, 2),
    (2, 0, 1, 1),
]


def transpose_case(stride, padding, output_padding, kernel, shape=(2, 3, 5, 4), co=2):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    data = te.placeholder(shape, name="data")
    w = te.placeholder((shape[1], co, kh, kw), name="kernel")
    out = topi.nn.conv2d_transpose_nchw(data, w, stride, padding, "float32", output_padding)
    return data, w, out


@pytest.mark.parametrize("stride,padding,output_padding,kernel", CONV2D_TRANSPOSE_CASES)
def test_conv2d_transpose_nchw(stride, padding, output_padding, kernel):
    data, w, out = transpose_case(stride, padding, output_padding, kernel)
    a, k = rand(*data.shape), rand(*w.shape)
    want = ref.conv2d_transpose_nchw_python(a, k, stride, padding, output_padding)
    close(run(out, data=a, kernel=k), want)


@pytest.mark.parametrize("stride,padding,output_padding,kernel", CONV2D_TRANSPOSE_CASES)
def test_conv2d_transpose_reads_provably_in_bounds(stride, padding, output_padding, kernel):
    """Every read's index interval over the iteration domain lies inside the tensor read (the
    padded input and kernel are sized for every tap), so the reads need no guard."""
    out = transpose_case(stride, padding, output_padding, kernel)[2]
    dom = Domain.of_axes(tuple(out.op.axis) + tuple(out.op.reduce_axis))
    loads = [n for n in walk(out.op.body) if isinstance(n, Load)]
    assert len(loads) == 2
    for load in loads:
        for index, extent in zip(load.indices, load.buffer.shape, strict=True):
            got = span(index, dom)
            assert got is not None and 0 <= got.lo and got.hi < extent, (load, got)


TRANSPOSE_FLOP_CASES = [  # (data shape, CO, K, stride, padding, output_padding, FLOP)
    ((1, 512, 4, 4), 256, 4, 2, 1, 0, 67_108_864),  # the dilated form: 268_435_456
    ((1, 64, 16, 16), 256, 3, 2, 1, 1, 134_217_728),  # the dilated form: 301_989_888
]


@pytest.mark.parametrize("shape,co,k,stride,padding,output_padding,flop", TRANSPOSE_FLOP_CASES)
def test_conv2d_transpose_multiplies_no_inserted_zero(
    shape, co, k, stride, padding, output_padding, flop
):
    """The reduction runs over ceil(K / stride)^2 taps per output pixel, not the K^2 taps of a
    convolution over the zero-dilated input: for K a multiple of the stride, exactly the
    N*CI*H*W*CO*K^2 multiply-adds of scattering every input pixel through the kernel."""
    data, w, out = transpose_case(stride, padding, output_padding, k, shape, co)
    n, ci, h, wd = shape
    taps = -(-k // stride)
    assert [a.extent for a in out.op.reduce_axis] == [ci, taps, taps]
    assert [t.op.name for t in out.op.input_tensors] == (
        ["data_pad", "kernel"] if k % stride == 0 else ["data_pad", "kernel_pad"]
    )
    assert (
        ComputeDAG([data, w, out]).flop_count
        == flop
        == 2 * n * co * out.shape[2] * out.shape[3] * ci * taps * taps
    )
    if k % stride == 0:
        assert flop == 2 * n * ci * h * wd * co * k * k


def test_conv2d_transpose_sampled_states_compute_it_on_the_interpreter():
    """Lowered sampled schedules of a stride-2 transposed convolution (floordiv / floormod
    indices, a padded kernel) equal the numpy reference on the CPU interpreter."""
    data, w, out = transpose_case(2, 1, 1, 3, shape=(1, 4, 5, 4), co=8)
    dag = ComputeDAG([data, w, out])
    sampler = SketchSampler(generate_sketches(dag))
    states = sampler.sample(4, 1)
    assert len(states) == 4
    inputs = random_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    want = ref.conv2d_transpose_nchw_python(inputs["data"], inputs["kernel"], 2, 1, 1)
    close(expected[out.op.name], want, rtol=1e-4, atol=1e-5)
    for s in states:
        assert_matches_dag(dag, sampler.programs[s.key()], s, inputs, expected)
