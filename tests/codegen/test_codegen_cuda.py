"""Tests of the CUDA printer (`autosched.codegen.cuda`): golden snippets of the printed source, and
nvcc compiles (sm_90, ptxas -v: no spills) of the hand-built programs of test_interpreter.py.

The nvcc tests are skipped with a reason when nvcc is missing; no test needs a GPU.
"""

from __future__ import annotations

import pytest

from autosched import te
from autosched.codegen.cuda import (
    aligned_unit_stride,
    codegen_program,
    is_nonneg,
    linear_form,
    literal,
)
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.te.expr import Const, Var
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.lower.test_interpreter import (
    BX,
    SOFTMAX_CASES,
    TX,
    TY,
    elementwise_program,
    intdiv_program,
    ld,
    loop,
    math_program,
    matmul_program,
    rowsum_cond_program,
    softmax_program,
    st,
)


def compile_ok(program: ir.Program, fast_math: bool = False) -> str:
    """Print, compile for sm_90, assert every kernel compiled without spills; the source."""
    source = codegen_program(program, fast_math=fast_math)
    resources = compile_resources(source, arch="sm_90")
    assert {k.name for k in program.kernels} <= set(resources), source
    for name, res in resources.items():
        assert res.spill_bytes == 0 and res.stack_bytes == 0, (name, res, source)
    return source


# ---- analyses ------------------------------------------------------------------------------


def test_is_nonneg():
    i = Var("i")
    assert is_nonneg(i * 4 + TX) and is_nonneg(te.floordiv(i, 3)) and is_nonneg(te.max(i - 3, 0))
    assert not is_nonneg(i - 1) and not is_nonneg(te.const(-2)) and not is_nonneg(te.min(i, -1))


def test_linear_form_and_alignment():
    i, v = Var("i"), Var("v")
    const, terms = linear_form((i * 2 + 3) * 4 - v + 8)
    assert const == 20 and {c for c, _ in terms.values()} == {8, -1}
    assert aligned_unit_stride(te.floordiv(TX, 2) * 8 + i * 4 + v, v, 4)
    assert not aligned_unit_stride(TX * 4 + v + 2, v, 4)  # constant term not a multiple of 4
    assert not aligned_unit_stride(TX * 2 + v, v, 4)  # coefficient not a multiple of 4
    assert not aligned_unit_stride(TX * 4 + v * 2, v, 4)  # stride 2
    assert not aligned_unit_stride(te.floormod(TX * 4 + v, 8), v, 4)  # v inside an atom


def test_literals():
    assert literal(Const(1.0, "float32")) == "1.000000000e+00f"
    assert literal(Const(0.1, "float32")) == "1.000000015e-01f"  # the float32 value, exactly
    assert literal(Const(-2.5, "float64")) == "(-2.50000000000000000e+00)"
    assert literal(Const(float("-inf"), "float32")) == "(-__int_as_float(0x7f800000))"
    assert literal(Const(float("inf"), "float64")) == "__longlong_as_double(0x7ff0000000000000LL)"
    assert literal(Const(1.5, "float16")) == "__float2half(1.500000000e+00f)"
    assert literal(Const(-(2**31), "int32")) == "(-2147483647 - 1)"
    assert literal(Const(7, "int64")) == "7LL" and literal(Const(True, "bool")) == "true"
    with pytest.raises(LoweringError, match="NaN"):
        literal(Const(float("nan"), "float32"))


# ---- golden snippets -----------------------------------------------------------------------


def test_elementwise_golden():
    src = codegen_program(elementwise_program())
    assert (
        'extern "C" __global__ void __launch_bounds__(128, 1) elementwise_kernel('
        "const float* __restrict__ A, float* __restrict__ B) {" in src
    )
    guard = "((((int)blockIdx.x) * 128) + ((int)threadIdx.x))"
    assert (
        f"  if (({guard} < 1000)) {{\n"
        f"    B[{guard}] = ((A[{guard}] * 2.000000000e+00f) + 1.000000000e+00f);" in src
    )
    assert "cuda_fp16" not in src and "as_floordiv" not in src


def test_matmul_golden():
    src = codegen_program(matmul_program())
    print(src)
    assert "__launch_bounds__(16, 1) matmul_kernel(" in src
    assert "  __shared__ __align__(16) float A_shared[128];\n" in src
    assert "  float C_local[16];\n" in src
    # cooperative fetch: one float4 load and one float4 store per vectorize loop
    assert "float4 vec = *reinterpret_cast<const float4*>(&A[" in src
    assert "*reinterpret_cast<float4*>(&A_shared[" in src and "= vec;" in src
    assert "*reinterpret_cast<float4*>(&B_shared[" in src and "= vec_1;" in src
    # index math of non-negative terms uses C's / and %
    assert "(((((int)threadIdx.y) * 4) + ((int)threadIdx.x)) / 2)" in src
    # unrolled inner loops, the write-back as make_float4 of register values
    assert "    #pragma unroll\n    for (int ki = 0; ki < 8; ++ki) {" in src
    assert "= make_float4(C_local[((i_2 * 4) + 0)], C_local[((i_2 * 4) + 1)]," in src
    assert src.count("__syncthreads();") == 2
    assert "for (int va" not in src  # vectorized loops leave no scalar loop behind


def test_vectorize_fallbacks_to_unrolled_scalar_loop():
    A, B = ir.Buffer("A", (64,), "float32"), ir.Buffer("B", (64,), "float32")
    misaligned = loop("v", 4, lambda v: st(B, TX * 4 + v, ld(A, TX * 4 + v + 1)), "vectorize")
    strided = loop("v", 4, lambda v: st(B, TX * 4 + v, ld(A, v * 16 + TX)), "vectorize")
    padded = loop(
        "v",
        4,
        lambda v: st(B, TX * 4 + v, te.if_then_else(TX > 0, ld(A, TX * 4 + v - 4), 0.0)),
        "vectorize",
    )
    body = ir.seq([
        ir.IfThenElse(TX < 15, misaligned),
        strided,
        padded,
        # the store misaligned
        loop("v", 4, lambda v: st(B, TX * 2 + v, ld(A, TX * 4 + v)), "vectorize"),
    ])  # fmt: skip
    program = ir.Program([ir.Kernel("k", (1, 1, 1), (16, 1, 1), [], body)], [A, B], [B])
    src = codegen_program(program)
    print(src)
    # the aligned store gets float4 stores; the unaligned / strided / guarded loads stay scalar
    assert src.count("*reinterpret_cast<float4*>(&B[") == 3
    assert "reinterpret_cast<const float4*>" not in src
    assert (
        "((((int)threadIdx.x) > 0) ? A[(((((int)threadIdx.x) * 4) + 0) - 4)] : 0.000000000e+00f)"
        in src
    )
    assert "#pragma unroll\n  for (int v = 0; v < 4; ++v) {" in src


def test_floordiv_printing():
    A = ir.Buffer("A", (64,), "int32")
    i = Var("i")
    body = loop(
        "i",
        4,
        lambda i: st(
            A, i * 16 + TX, te.floordiv(TX, 4) + te.floormod(TX - 8, 4) + te.floordiv(i - 2, 3)
        ),
    )
    src = codegen_program(ir.Program([ir.Kernel("k", (1, 1, 1), (16, 1, 1), [], body)], [A], [A]))
    assert "(((int)threadIdx.x) / 4)" in src
    assert "as_floormod((((int)threadIdx.x) - 8), 4)" in src and "as_floordiv((i - 2), 3)" in src
    assert "AS_FLOOR_INT(int)" in src
    del i


def test_math_printing_and_fast_math():
    src = codegen_program(math_program())
    for call in (
        "expf(",
        "logf(",
        "sqrtf(",
        "rsqrtf(",
        "tanhf(",
        "erff(",
        "fabsf(",
        "floorf(",
        "ceilf(",
        "powf(",
    ):
        assert call in src, call
    assert "(1.0f / (1.0f + expf(-(X[((int)threadIdx.x)]))))" in src and "__expf" not in src
    fast = codegen_program(math_program(), fast_math=True)
    assert "__expf(X[((int)threadIdx.x)])" in fast and "__logf(" in fast and "__powf(" in fast
    f64 = codegen_program(math_program("float64"))
    assert "exp(X[" in f64 and "fabs(X[" in f64 and "(1.0 / (1.0 + exp(-(X[" in f64
    f16 = codegen_program(math_program("float16"))
    assert (
        "#include <cuda_fp16.h>" in f16
        and "__float2half(expf(__half2float(X[((int)threadIdx.x)])))" in f16
    )


def test_minmax_casts_and_select_printing():
    A = ir.Buffer("A", (16,), "float32")
    H = ir.Buffer("H", (16,), "float16")
    Ib = ir.Buffer("I", (16,), "int32")
    body = ir.seq([
        st(A, TX, te.max(ld(A, TX), 0.0) + te.min(ld(A, TX), te.cast(ld(Ib, TX), "float32"))),
        st(H, TX, te.cast(te.max(ld(A, TX), te.cast(ld(H, TX), "float32")), "float16")),
        st(Ib, TX, te.if_then_else(
            ld(A, TX) > 0.0, te.max(ld(Ib, TX), 3), te.cast(ld(H, TX), "int32"))),
    ])  # fmt: skip
    src = codegen_program(
        ir.Program([ir.Kernel("k", (1, 1, 1), (16, 1, 1), [], body)], [A, H, Ib], [A])
    )
    assert "fmaxf(A[((int)threadIdx.x)], 0.000000000e+00f)" in src
    assert "fminf(A[((int)threadIdx.x)], ((float)I[((int)threadIdx.x)]))" in src
    assert (
        "H[((int)threadIdx.x)] = __float2half("
        "fmaxf(A[((int)threadIdx.x)], __half2float(H[((int)threadIdx.x)])));" in src
    )
    assert (
        "((A[((int)threadIdx.x)] > 0.000000000e+00f) ? max(I[((int)threadIdx.x)], 3) : "
        "((int)__half2float(H[" in src
    )


def test_wide_buffers_use_long_long_indices():
    A = ir.Buffer("A", (1 << 31,), "float32")
    body = loop("i", 4, lambda i: st(A, (BX * 256 + TX) * 4 + i, 1.0))
    src = codegen_program(
        ir.Program([ir.Kernel("k", (1 << 21, 1, 1), (256, 1, 1), [], body)], [A], [A])
    )
    assert "for (long long i = 0;" in src and "((long long)blockIdx.x)" in src


def test_allreduce_golden():
    src = codegen_program(softmax_program(4, 100, 64, 2))
    assert "{  // allreduce max over threadIdx.x (64 threads)" in src
    assert "red = fmaxf(red, red_o); }" in src and "__shfl_down_sync(0xffffffffu, red, 16);" in src
    assert "__shared__ __align__(16) float red_buf[4];" in src and "row_max[0] = red;" in src
    small = codegen_program(softmax_program(3, 20, 8, 3))  # 24 threads: a partial warp
    assert "red = fmaxf(red, __shfl_xor_sync(((1u << 24) - 1u), red, 4, 8));" in small
    assert "__syncthreads" not in small
    strided = codegen_program(softmax_program(4, 50, 32, 2, "threadIdx.y"))
    assert "red_buf[red_lin - ((int)threadIdx.y) * 2 + red_s * 2]" in strided


def test_unbound_variable_is_an_error():
    A = ir.Buffer("A", (4,), "float32")
    program = ir.Program([ir.Kernel("k", (1, 1, 1), (4, 1, 1), [], st(A, Var("q"), 1.0))], [A], [A])
    with pytest.raises(LoweringError, match="variable 'q' is not bound"):
        codegen_program(program)


def test_multi_kernel_program_and_names():
    A, T = ir.Buffer("A", (32,), "float32"), ir.Buffer("T", (32,), "float32")
    k1 = ir.Kernel(
        "k1", (1, 1, 1), (32, 1, 1), [], loop("i.outer", 1, lambda i: st(T, TX + i, ld(A, TX)))
    )
    k2 = ir.Kernel("k2", (1, 1, 1), (32, 1, 1), [], st(A, TX, ld(T, TX) * 2.0))
    src = codegen_program(ir.Program([k1, k2], [A, T], [A], [T]))
    assert "k1(const float* __restrict__ A, float* __restrict__ T)" in src
    assert "k2(float* __restrict__ A, const float* __restrict__ T)" in src
    assert "for (int i_outer = 0; i_outer < 1; ++i_outer)" in src


# ---- nvcc ----------------------------------------------------------------------------------


@needs_nvcc
def test_matmul_compiles_without_spills():
    src = compile_ok(matmul_program())
    assert "float4" in src


@needs_nvcc
@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=lambda c: f"{c[4][-1]}{c[2]}x{c[3]}")
def test_allreduce_compiles(case):
    rows, cols, ext, groups, tag = case
    compile_ok(softmax_program(rows, cols, ext, groups, tag))


@needs_nvcc
def test_allreduce_cond_and_elementwise_compile():
    compile_ok(rowsum_cond_program(4, 40, 48, 2))
    compile_ok(elementwise_program())


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_float16_float64_compile(dtype):
    compile_ok(elementwise_program(300, 64, dtype))
    compile_ok(math_program(dtype))
    X, Y = ir.Buffer("X", (64,), dtype), ir.Buffer("Y", (64,), dtype)
    red = ir.Buffer("red", (1,), dtype, "local")
    vec = loop("v", 2, lambda v: st(Y, TX * 2 + v, ld(X, TX * 2 + v) + ld(red, 0)), "vectorize")
    body = ir.seq([
        ir.AllReduce("max", ld(X, TY * 32 + TX), None, red, te.const(0), "threadIdx.x", 32),
        ir.IfThenElse(TY == 0, vec),
    ])  # fmt: skip
    program = ir.Program([ir.Kernel("k", (1, 1, 1), (32, 2, 1), [red], body)], [X, Y], [Y])
    src = compile_ok(program)
    vtype = "half2" if dtype == "float16" else "double2"
    assert f"*reinterpret_cast<{vtype}*>(&Y[(((int)threadIdx.x) * 2)])" in src


@needs_nvcc
def test_math_and_intdiv_compile():
    compile_ok(math_program())
    compile_ok(math_program(), fast_math=True)
    compile_ok(intdiv_program())
