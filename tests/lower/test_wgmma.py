"""Warpgroup MMA (wgmma) statements on hand-built programs (`tests/lower/wgmma_programs.py`).

The layout facts against the PTX ISA (`lower/wgmma_layout.py`); the CPU interpreter against
numpy for float16 / bfloat16, with and without the 128-byte swizzle; descriptors that describe
the stored tile wrongly computing wrong products; the asynchronous rules the interpreter
enforces (fence, wait, proxy fence, operands left alone while in flight); the verifier; the
printed PTX, compiled for sm_90a without spills; the build path's choice of sm_90a.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import mma_layout as ml
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.interpreter import InterpreterError
from autosched.lower.verify import verify_program
from autosched.te.expr import Const
from measure import compile_resources
from measure.compile_options import (
    ARCH_SPECIFIC_MARKER,
    compile_arch,
    nvcc_arch_options,
)
from tests.compilers import needs_nvcc
from tests.lower.wgmma_programs import (
    assert_matches_numpy_on_gpu,
    interpret_product,
    layouts,
    wgmma_program,
)

SHAPES = {
    "one_block": {},
    "blocks": {"m": 128, "n": 64, "k": 64, "bn": 32, "bk": 32},
    "swizzle_128b": {"m": 64, "n": 64, "k": 128, "bn": 64, "bk": 64, "swizzle": "128B"},
}


# ---- the PTX ISA's definitions ------------------------------------------------------------


def test_accumulator_layout_covers_each_element_once():
    for n in (8, 32, 256):
        t, i = np.meshgrid(np.arange(128), np.arange(n // 2), indexing="ij")
        rows, cols = wl.accumulator_position(t, i)
        assert len(set(zip(rows.ravel(), cols.ravel(), strict=True))) == 64 * n
    # spot values of the ISA's figure: thread 37 (warp 1, lane 5), values 0, 3 and 5
    assert wl.accumulator_position(37, 0) == (17, 2)
    assert wl.accumulator_position(37, 3) == (25, 3)
    assert wl.accumulator_position(37, 5) == (17, 11)


def test_descriptor_fields_round_trip_and_match_the_isa_example():
    # MN-major, no swizzle, bf16: LBO 128 elements (encoded 16), SBO 64 (encoded 8)
    value = wl.encode(0x1230, 256, 128, "none")
    assert (value >> 16) & 0x3FFF == 16 and (value >> 32) & 0x3FFF == 8
    assert wl.decode(value) == wl.Descriptor(0x1230, 256, 128, "none")
    assert wl.decode(wl.encode(1024, 16, 1024, "128B")).swizzle == "128B"
    assert wl.encode(0, 16, 1024, "128B") >> 62 == 1


def test_canonical_layouts_are_the_isa_ones():
    d = wl.Descriptor(0, lbo=128, sbo=512, swizzle="none")
    # K-major: 8 rows of 16 bytes per core matrix, the next K core matrix LBO away
    assert wl.element_address(d, "k", 3, 5) == 3 * 16 + 5 * 2
    assert wl.element_address(d, "k", 9, 10) == 512 + 16 + 128 + 2 * 2
    # MN-major: 8 contiguous rows (M / N) per 16 bytes, K rows 16 bytes apart
    assert wl.element_address(d, "mn", 9, 10) == 2 + 512 + 2 * 16 + 128
    swizzled = wl.Descriptor(0, 16, 1024, "128B")
    # 128-byte swizzle: row r's 16-byte chunk c lands at chunk c ^ (r % 8)
    assert wl.element_address(swizzled, "k", 3, 8) == 3 * 128 + (1 ^ 3) * 16


# ---- the interpreter against numpy --------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("mma_accumulator", [False, True])
def test_interpreter_matches_numpy(dtype, shape, mma_accumulator):
    program = wgmma_program(dtype, mma_accumulator=mma_accumulator, **SHAPES[shape])
    verify_program(program)
    c, ref = interpret_product(program, dtype)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


def test_an_mma_accumulator_holds_the_wgmma_registers_tile_by_tile():
    """Warp w's lane l's value e of tile j is the warpgroup's thread 32 w + l's value 8 j + e."""
    for w, lane, j, e in ((1, 5, 0, 3), (3, 30, 2, 6)):
        row, col = wl.accumulator_position(32 * w + lane, 8 * j + e)
        r, c = ml.tile_position(ir.ACCUMULATOR_SCOPE, e).at(lane)
        assert (row, col) == (16 * w + r, 16 * j + c)


def test_registers_written_while_in_flight_are_caught():
    program = wgmma_program(mma_accumulator=True)
    kernel = program.kernels[0]
    fill, loop, store = kernel.body.stmts
    step = loop.body.stmts
    wait = next(i for i, x in enumerate(step) if isinstance(x, wi.WgmmaWait))
    step.insert(wait, fill)  # the accumulator's fill before the wait
    with pytest.raises(InterpreterError, match="written while the wgmma"):
        interpret_product(program)
    program = wgmma_program(mma_accumulator=True, wait=False)
    with pytest.raises(InterpreterError, match="a wgmma in flight reads it"):
        # the next K step's copy reaches the operands of the wgmma in flight
        interpret_product(program)


@pytest.mark.parametrize(
    "wrong", [{"lbo": 512}, {"sbo": 128}, {"major": "mn"}, {"swizzle": "128B", "lbo": 16}]
)
def test_a_descriptor_that_misdescribes_the_tile_computes_a_wrong_product(wrong):
    a_layout = replace(layouts(32, 32)[0], **wrong)
    program = wgmma_program(m=64, n=32, k=32, bk=32, a_layout=a_layout)
    try:
        c, ref = interpret_product(program)
    except InterpreterError as exc:  # or reads past the tile
        assert "out-of-bounds" in str(exc)
        return
    assert np.abs(c - ref).max() > 0.1


# ---- asynchronous rules -------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"wait": False}, "in flight"),
        ({"fence": False}, "wgmma.fence"),
        ({"proxy_fence": False}, "fence.proxy.async"),
    ],
)
def test_interpreter_enforces_the_asynchronous_rules(flags, message):
    with pytest.raises(InterpreterError, match=message):
        interpret_product(wgmma_program(**flags))


def test_overwriting_an_operand_before_the_wait_is_caught():
    """At the store (a cp.async may land as soon as it is issued), not only once the copy
    lands."""
    program = wgmma_program(k=32, bk=16, wait=False)
    kernel = program.kernels[0]
    kernel.body = ir.seq([*kernel.body.stmts[:2], wi.WgmmaWait(0), kernel.body.stmts[2]])
    with pytest.raises(InterpreterError, match="stores into A_shared.*a wgmma in flight reads it"):
        interpret_product(program)


# ---- verifier -----------------------------------------------------------------------------


def test_verifier_rules():
    program = wgmma_program()
    kernel = program.kernels[0]
    kernel.block = (32, 2, 1)
    with pytest.raises(LoweringError, match="blockDim"):
        verify_program(program)
    program = wgmma_program(a_layout=replace(layouts(32, 16)[0], lbo=100))
    with pytest.raises(LoweringError, match="LBO 100"):
        verify_program(program)
    program = wgmma_program()
    program.kernels[0].allocs[2].shape = (1, 64, 12)
    with pytest.raises(LoweringError, match="N = 12"):
        verify_program(program)


# ---- CUDA -------------------------------------------------------------------------------


def test_printed_ptx():
    source = codegen_program(wgmma_program("bfloat16"))
    assert ARCH_SPECIFIC_MARKER in source
    assert "float C_acc[1][16];" in source
    assert "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16" in source
    assert "p, 1, 1, 0, 1;" in source  # A K-major, B N-major
    lay_a, _ = layouts(32, 16)
    fields = wl.encode(0, lay_a.lbo, lay_a.sbo, lay_a.swizzle)
    assert f"as_wgmma_desc(&A_shared[0], {fields:#x}ULL)" in source
    for line in (
        "wgmma.fence.sync.aligned",
        "wgmma.commit_group.sync.aligned",
        "wgmma.wait_group.sync.aligned 0",
        "fence.proxy.async.shared::cta",
    ):
        assert line in source
    swizzled = codegen_program(wgmma_program(**SHAPES["swizzle_128b"]))
    assert "__shared__ __align__(1024) half A_shared[4096];" in swizzled


@needs_nvcc
def test_compiles_for_sm_90a_without_spills():
    for mma_accumulator in (False, True):
        program = wgmma_program(m=128, n=256, k=64, bn=256, bk=32, mma_accumulator=mma_accumulator)
        resources = compile_resources(codegen_program(program), arch="sm_90")  # made sm_90a
        (res,) = resources.values()
        assert res.spill_bytes == 0 and res.stack_bytes == 0


def test_build_path_chooses_sm_90a_for_marked_sources_on_hopper_only():
    marked = f"{ARCH_SPECIFIC_MARKER}\n__global__ void k() {{}}"
    assert compile_arch(marked, "sm_90") == "sm_90a"
    assert compile_arch(marked, "sm_80") == "sm_80"
    assert compile_arch("__global__ void k() {}", "sm_90") == "sm_90"
    assert nvcc_arch_options("sm_90a") == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert nvcc_arch_options("sm_90") == ("-arch=sm_90",)
    assert ARCH_SPECIFIC_MARKER not in codegen_program(wgmma_program_without_wgmma())


def wgmma_program_without_wgmma() -> ir.Program:
    A = ir.Buffer("A", (4,), "float32")
    body = ir.Store(A, ir.int32(0), Const(1.0, "float32"))
    return ir.Program([ir.Kernel("k", (1, 1, 1), (1, 1, 1), [], body)], [A], [A])


# ---- GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("mma_accumulator", [False, True])
def test_gpu_matches_numpy(dtype, shape, mma_accumulator):
    program = wgmma_program(dtype, mma_accumulator=mma_accumulator, **SHAPES[shape])
    assert_matches_numpy_on_gpu(program, dtype)


def test_long_fetches_into_wgmma_operands_unroll_eight_iterations_at_a_time():
    """A copy into a wgmma operand tile of more than 8 iterations a thread prints
    `#pragma unroll 8` (nvcc would unroll it whole and spill a long gather); shorter copies and
    every other loop print as before."""
    short = codegen_program(wgmma_program(k=32, bk=16))  # A: 8 iterations a thread, B: 4
    assert "#pragma unroll 8" not in short
    long = wgmma_program(**SHAPES["swizzle_128b"])  # A and B: 32 iterations a thread
    lines = codegen_program(long).splitlines()
    pragmas = [i for i, line in enumerate(lines) if "#pragma unroll 8" in line]
    assert len(pragmas) == 2
    assert all("_it = 0;" in lines[i + 1] for i in pragmas)  # the two copy loops
    c, ref = interpret_product(long)  # the program printed with them computes the product
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
