"""Kernels over the 48 KB of static shared memory: the printer declares their shared buffers in
dynamic shared memory (`autosched.codegen.cuda.shared_layout`), `build` sizes the launch, and the
limits (`check_program`, `check_resources`) go up to the device's opt-in limit.

The nvcc tests are skipped with a reason when nvcc is missing; no test needs a GPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosched import te
from autosched.codegen.build import build_program
from autosched.codegen.cuda import STATIC_SHARED_LIMIT, codegen_program, shared_layout
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.tensor_core_init import FillTensorCore, TensorCoreDraw
from autosched.sketch.utils import SketchParams
from autosched.sketch.validity import Reason, check_program
from autosched.task.evaluate import evaluate
from measure import KernelArtifact, Launch, MeasureErrorKind, check_resources, compile_resources
from measure.hardware import HardwareParams
from measure.ptxas import KernelResources
from tests.compilers import needs_nvcc
from tests.interpreter_check import assert_half_outputs_match, half_inputs
from tests.lower.test_interpreter import TX, ld, loop, matmul_program, run, st
from tests.sketch.test_tensor_core_sketch import tc_dag

EXTERN = "extern __shared__ __align__({}) unsigned char as_dynamic_shared[];"
N, HALVES, THREADS = 12289, 24, 256  # 49156 bytes of float32, then 48 of half: over 48 KB


def staging_program() -> ir.Program:
    """B[i] = A[N-1-i] + H[i % HALVES]: A reversed through a float32 shared buffer of N
    elements, plus a half shared buffer H = half(A[:HALVES]); 49216 bytes with H's offset
    rounded up to 16, just over the static limit."""
    A, B = ir.Buffer("A", (N,), "float32"), ir.Buffer("B", (N,), "float32")
    S = ir.Buffer("S_shared", (N,), "float32", "shared")
    H = ir.Buffer("H_shared", (HALVES,), "float16", "shared")
    trips = math.ceil(N / THREADS)

    def strided(body):
        """`body(i)` for i = c * THREADS + threadIdx.x, over the N elements."""

        def step(c):
            i = c * THREADS + TX
            return ir.IfThenElse(i < N, body(i))

        return loop("c", trips, step)

    half_a = te.cast(ld(A, TX), "float16")
    body = ir.seq(
        [
            strided(lambda i: st(S, i, ld(A, i))),
            ir.IfThenElse(TX < HALVES, st(H, TX, half_a)),
            ir.Barrier(),
            strided(lambda i: st(B, i, ld(S, N - 1 - i) + te.cast(ld(H, i % HALVES), "float32"))),
        ]
    )
    k = ir.Kernel("staging_kernel", (1, 1, 1), (THREADS, 1, 1), [S, H], body)
    return ir.Program([k], [A, B], [B])


@pytest.fixture(scope="module")
def tensor_core_program() -> ir.Program:
    """A Tensor Core fp16 matmul (128 x 128 x 64, cast epilogue) in one block of 8 warps: a
    128 x 128 float32 tile plus padded A and B tiles of a K chunk of 64, 99 KB of shared memory."""
    draw = TensorCoreDraw((4, 2), (2, 4), 4, (8, 8))
    saved = FillTensorCore.draw
    FillTensorCore.draw = lambda self, ctx, g, rng: draw
    try:
        sampler = SketchSampler(generate_sketches(tc_dag("matmul_fp16", args=(128, 128, 64))))
        (state,) = sampler.sample(1, 0)
    finally:
        FillTensorCore.draw = saved
    return sampler.programs[state.key()]


# ---- printing ------------------------------------------------------------------------------


def test_kernels_under_the_static_limit_print_static_arrays():
    kernel = build_program(matmul_program())
    assert "__shared__ __align__(16) float A_shared[128];" in kernel.source
    assert "__shared__ __align__(16) float B_shared[128];" in kernel.source
    assert "extern __shared__" not in kernel.source
    assert kernel.launches[0].dynamic_shared_bytes == 0


def test_a_kernel_over_48_kb_places_its_buffers_in_dynamic_shared_memory():
    program = staging_program()
    (k,) = program.kernels
    offsets, align, total = shared_layout(k)
    assert offsets == {id(k.allocs[0]): 0, id(k.allocs[1]): 49168} and align == 16
    assert total == 49168 + 2 * HALVES > STATIC_SHARED_LIMIT
    kernel = build_program(program)
    assert EXTERN.format(16) in kernel.source
    assert "float* __restrict__ S_shared = (float*)(as_dynamic_shared + 0);" in kernel.source
    assert "half* __restrict__ H_shared = (half*)(as_dynamic_shared + 49168);" in kernel.source
    assert "__shared__ __align__(16) float" not in kernel.source
    assert kernel.launches[0].dynamic_shared_bytes == total
    # the interpreter runs the IR, which printing does not change
    a = np.random.default_rng(0).uniform(-1, 1, N).astype(np.float32)
    b = run(program, A=a, B=np.full(N, np.nan, np.float32))["B"]
    halves = a[:HALVES].astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(b, a[::-1] + halves[np.arange(N) % HALVES])


def test_tensor_core_tiles_are_32_byte_aligned_in_dynamic_shared_memory(tensor_core_program):
    (k,) = tensor_core_program.kernels
    assert k.shared_bytes == 128 * 128 * 4 + (128 * 72 + 64 * 136) * 2  # 99 KB
    kernel = build_program(device_program(tensor_core_program))
    assert EXTERN.format(32) in kernel.source
    assert "__shared__ __align__(32) half" not in kernel.source
    offsets, _, total = shared_layout(k)
    assert all(offset % 32 == 0 for offset in offsets.values())
    assert kernel.launches[0].dynamic_shared_bytes == total == k.shared_bytes
    dag = tc_dag("matmul_fp16", args=(128, 128, 64))
    inputs = half_inputs(dag)
    assert_half_outputs_match(dag, tensor_core_program, inputs, evaluate(dag.tensors, inputs))


@needs_nvcc
def test_dynamic_kernels_compile_with_no_static_shared_memory(tensor_core_program):
    source = codegen_program(staging_program())
    source += codegen_program(device_program(tensor_core_program)).split("\n", 1)[1]
    resources = compile_resources(source, arch="sm_90")
    assert set(resources) == {"staging_kernel", "default_function_kernel"}, source
    assert all(r.shared_bytes == 0 and r.spill_bytes == 0 for r in resources.values())


# ---- limits --------------------------------------------------------------------------------


def test_limits_accept_dynamic_shared_memory_up_to_the_opt_in_limit(tensor_core_program):
    hw = HardwareParams()
    assert check_program(tensor_core_program, hw, SketchParams()) is None
    small = HardwareParams(max_shared_memory_per_block_optin=64 * 1024)
    assert check_program(tensor_core_program, small, SketchParams()) == Reason.SHARED_MEMORY
    args = build_program(staging_program()).args
    res = {"k": KernelResources(registers=32)}

    def check(dynamic: int):
        launch = Launch("k", (1, 1, 1), (128, 1, 1), dynamic)
        return check_resources(KernelArtifact("", (launch,), args), res, hw)

    assert check(100 * 1024) == (MeasureErrorKind.NO_ERROR, "")
    kind, message = check(hw.max_shared_memory_per_block_optin + 16)
    assert kind == MeasureErrorKind.RESOURCE_LIMIT
    assert message == f"k: 0 static + {227 * 1024 + 16} dynamic shared bytes > {227 * 1024}"
