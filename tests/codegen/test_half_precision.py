"""float16 and bfloat16 through the pipeline: te and topi with float32 accumulation, the numpy
reference, sampled schedules on the CPU interpreter, CUDA that NVRTC and nvcc compile for sm_90,
the measured-output tolerance, and the cost model's features.

bfloat16 tensors are uint16 bit patterns in numpy (`measure.bfloat16`). Products of two float16
(or bfloat16) values are exact in float32, so a float32-accumulated matmul on the interpreter
differs from the float64 reference only by the order of its float32 additions (rtol 1e-4, as the
float32 tests); elementwise half programs follow the rounding rule of `autosched.te.dtype` on
both sides and must match bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.features import extract_features
from autosched.lower.interpreter import run_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.sketch import SketchSampler, generate_sketches
from autosched.task.evaluate import evaluate
from autosched.te.dtype import from_storage, numpy_dtype, to_storage
from autosched.te.tensor import PlaceholderOp
from measure import ArgSpec, MeasureErrorKind, compile_kernel, make_reference
from measure.bfloat16 import from_bits, round_bfloat16, to_bits
from measure.nvrtc import find_nvrtc
from measure.reference import compare_output, default_tolerance
from tests.compilers import needs_nvcc

HALVES = ("float16", "bfloat16")


def _matmul(dtype):
    a = te.placeholder((16, 32), dtype, "A")
    b = te.placeholder((32, 24), dtype, "B")
    return [a, b, topi.matmul(a, b, out_dtype="float32")]


def _dense(dtype):
    x = te.placeholder((8, 32), dtype, "X")
    w = te.placeholder((24, 32), dtype, "W")
    return [x, w, topi.dense(x, w, out_dtype="float32")]


def _batch_matmul(dtype):
    a = te.placeholder((2, 16, 32), dtype, "A")
    b = te.placeholder((2, 24, 32), dtype, "B")
    return [a, b, topi.batch_matmul(a, b, out_dtype="float32")]


def _elementwise(dtype):
    a = te.placeholder((16, 64), dtype, "A")
    b = te.placeholder((16, 64), dtype, "B")
    out = te.compute((16, 64), lambda i, j: a[i, j] * b[i, j] + a[i, j] / b[i, j] - 0.3, "E")
    return [a, b, topi.relu(out)]


BUILDERS = {
    "matmul": _matmul,
    "dense": _dense,
    "batch_matmul": _batch_matmul,
    "elementwise": _elementwise,
}
CASES = [(name, dtype) for name in BUILDERS for dtype in HALVES]


def _store(values: np.ndarray, dtype: str) -> np.ndarray:
    return to_bits(values) if dtype == "bfloat16" else values.astype(numpy_dtype(dtype))


def _inputs(tensors, seed=0, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed)
    return {
        t.name: _store(rng.uniform(low, high, t.shape), t.dtype)
        for t in tensors
        if isinstance(t.op, PlaceholderOp)
    }


def _range(name):
    return (0.5, 2.0) if name == "elementwise" else (-1.0, 1.0)  # keep a / b finite


def _sampled(tensors, n=4, seed=0):
    sampler = SketchSampler(generate_sketches(ComputeDAG(tensors)))
    states = sampler.sample(n, seed)
    assert states, sampler.rejected
    return [sampler.programs[s.key()] for s in states]


def _run(program, inputs):
    arrays = {k: v.copy() for k, v in inputs.items()}
    for b in program.outputs:
        arrays[b.name] = to_storage(np.full(b.shape, np.nan, np.float32), b.dtype)
    run_program(program, arrays)
    return arrays


# ---- bfloat16 bits ----------------------------------------------------------------------------


def test_bfloat16_rounds_to_nearest_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.5, np.inf], np.float32)
    want = [1.0, 1.0, 1 + 2**-6, 1 + 2**-7, -2.5, np.inf]
    np.testing.assert_array_equal(round_bfloat16(x), np.array(want, np.float32))
    assert np.isnan(from_bits(to_bits(np.float32(np.nan))))
    assert to_bits(np.float32(1.0)) == 0x3F80


# ---- te, topi and the reference ----------------------------------------------------------------


@pytest.mark.parametrize("name,dtype", CASES)
def test_reference_is_right(name, dtype):
    tensors = BUILDERS[name](dtype)
    out = tensors[-1]
    assert out.dtype == ("float32" if name != "elementwise" else dtype)
    inputs = _inputs(tensors, 0, *_range(name))
    got = from_storage(evaluate(tensors, inputs)[out.name], out.dtype)
    a, b = (from_storage(inputs[t.name], dtype).astype(np.float64) for t in tensors[:2])
    if name == "elementwise":
        np.testing.assert_allclose(got, np.maximum(a * b + a / b - 0.3, 0), rtol=2e-2, atol=2e-2)
        return
    expected = {
        "matmul": lambda: a @ b,
        "dense": lambda: a @ b.T,
        "batch_matmul": lambda: a @ b.transpose(0, 2, 1),
    }[name]()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_elementwise_reference_rounds_every_operation():
    """a*b + a/b - 0.3 with each operation rounded to the dtype, relu last: bit for bit."""
    for dtype in HALVES:
        tensors = _elementwise(dtype)
        inputs = _inputs(tensors, 1, 0.5, 2.0)
        a, b = (from_storage(inputs[t.name], dtype) for t in tensors[:2])
        r = round_bfloat16 if dtype == "bfloat16" else (lambda v: np.float16(v))
        c = r(np.float32(0.3))
        want = (r(r(a * b) + r(a / b)) - c) if dtype == "bfloat16" else (a * b + a / b) - c
        want = np.maximum(r(want), 0)
        got = from_storage(evaluate(tensors, inputs)[tensors[-1].name], dtype)
        np.testing.assert_array_equal(got, want)


# ---- sampled schedules on the interpreter ------------------------------------------------------


@pytest.mark.parametrize("name,dtype", CASES)
def test_sampled_states_match_the_reference(name, dtype):
    tensors = BUILDERS[name](dtype)
    out = tensors[-1]
    inputs = _inputs(tensors, 2, *_range(name))
    expected = from_storage(evaluate(tensors, inputs)[out.name], out.dtype)
    for program in _sampled(tensors):
        got = from_storage(_run(program, inputs)[out.name], out.dtype)
        if name == "elementwise":
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        assert not extract_features(program).size == 0  # features do not crash on halves


# ---- CUDA --------------------------------------------------------------------------------------


def test_headers_only_when_used():
    f32 = codegen_program(_sampled(_matmul("float32"), 1)[0])
    f16 = codegen_program(_sampled(_elementwise("float16"), 1)[0])
    bf16 = codegen_program(_sampled(_elementwise("bfloat16"), 1)[0])
    assert "cuda_fp16.h" not in f32 and "cuda_bf16.h" not in f32
    assert "cuda_fp16.h" in f16 and "cuda_bf16.h" not in f16 and "__hmul_rn" in f16
    assert "cuda_bf16.h" in bf16 and "__nv_bfloat16" in bf16 and "__float2bfloat16" in bf16


COMPILERS = [
    pytest.param(
        "nvrtc", marks=pytest.mark.skipif(find_nvrtc() is None, reason="libnvrtc not found")
    ),
    pytest.param("nvcc", marks=[needs_nvcc, pytest.mark.slow]),  # NVRTC is the builder's
]


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("name,dtype", CASES)
def test_generated_cuda_compiles(name, dtype, compiler):
    for program in _sampled(BUILDERS[name](dtype), 1):
        source = codegen_program(program)
        kind, message, cubin, _ = compile_kernel(source, "sm_90", compiler=compiler)
        assert kind == MeasureErrorKind.NO_ERROR, f"{message}\n{source}"
        assert cubin


# ---- the measured-output tolerance -------------------------------------------------------------


def test_tolerance_grows_with_precision_and_reduction_length():
    f32, f16, bf16 = (default_tolerance([d]) for d in ("float32", "float16", "bfloat16"))
    assert f32[0] < f16[0] <= bf16[0] and f32[1] < f16[1] <= bf16[1]
    short, long = default_tolerance(["float16"], 16), default_tolerance(["float16"], 4096)
    assert long[1] > short[1] and long[1] == pytest.approx(6 * 2**-11 * 64)
    assert default_tolerance(["float32"], 4096) == default_tolerance(["float32"])


@pytest.mark.parametrize("dtype", HALVES)
def test_tolerance_accepts_correct_and_rejects_wrong_kernels(dtype):
    """A float32-accumulated matmul of half inputs: the interpreter's output (another summation
    order) passes; one element off by 1% of the output scale, or a missing k term, fails."""
    tensors = _matmul(dtype)
    out = tensors[-1]
    inputs = _inputs(tensors, 3)
    args = [ArgSpec(t.name, t.shape, t.dtype, t is out) for t in tensors]
    ref = make_reference(args, lambda **kw: evaluate(tensors, kw)[out.name], seed=3)
    inputs = dict(ref.inputs)
    (program,) = _sampled(tensors, 1)
    got = _run(program, inputs)[out.name]
    expected = ref.outputs[out.name]
    assert compare_output("C", got, expected, ref.rtol, ref.atol) is None
    rms = float(np.sqrt(np.mean(expected.astype(np.float64) ** 2)))
    wrong = got.copy()
    wrong[3, 5] += 0.01 * rms
    assert compare_output("C", wrong, expected, ref.rtol, ref.atol) is not None
    a, b = (from_storage(inputs[t.name], dtype).astype(np.float64) for t in tensors[:2])
    missing = (a[:, 1:] @ b[1:, :]).astype(np.float32)
    assert compare_output("C", missing, expected, ref.rtol, ref.atol) is not None


def test_bfloat16_outputs_compare_as_values():
    """A bfloat16 output is checked as the values its bit patterns encode: off by one ulp
    passes, off by a tenth of the scale fails, an unwritten element (0xFFFF: NaN) fails."""
    from measure.reference import compare_outputs

    a = te.placeholder((64,), "bfloat16", "A")
    out = te.compute((64,), lambda i: a[i] * a[i], "S")
    args = [ArgSpec("A", (64,), "bfloat16"), ArgSpec("S", (64,), "bfloat16", True)]
    ref = make_reference(args, lambda A: evaluate([a, out], {"A": A})["S"], seed=1)
    assert ref.bfloat16_outputs == ("S",) and ref.outputs["S"].dtype == np.uint16
    good = ref.outputs["S"].copy()
    good[0] += 1  # one ulp
    assert compare_outputs({"S": good}, ref, {}) is None
    values = from_bits(ref.outputs["S"]).copy()
    values[7] += 0.1 * float(np.sqrt(np.mean(values**2)))
    assert compare_outputs({"S": to_bits(values)}, ref, {}) is not None
    unwritten = ref.outputs["S"].copy()
    unwritten[9] = 0xFFFF
    assert compare_outputs({"S": unwritten}, ref, {}) is not None
