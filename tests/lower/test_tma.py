"""TMA copies and mbarriers (`lower/tma_ir.py`): the hand-built pipelined TMA + wgmma matmul
(`tma_programs.py`) on the interpreter against numpy, the interpreter's and the verifier's
refusals of broken pipelines, its CUDA compiled for sm_90a, and on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower.interpret_tma import swizzle_128b
from autosched.lower.interpreter import InterpreterError
from autosched.lower.verify import verify_program
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.lower.tma_programs import tma_matmul_program
from tests.lower.wgmma_programs import assert_matches_numpy_on_gpu, interpret_product

# one block of one warpgroup; K = 200: four k tiles around a ring of three slots, the last
# box reaching past K (read as zeros)
SMALL = {"m": 64, "n": 64, "k": 200, "warpgroups": 1, "bn": 64, "slots": 3}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_tma_pipeline_computes_the_product(dtype):
    program = tma_matmul_program(dtype=dtype, **SMALL)
    verify_program(program)
    c, ref = interpret_product(program, dtype)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


def test_two_warpgroups_and_two_b_boxes_compute_the_product():
    program = tma_matmul_program(m=128, n=128, k=128, warpgroups=2, bn=128, slots=2)
    c, ref = interpret_product(program)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


def test_the_128_byte_swizzle_permutes_16_byte_units_within_each_row():
    rows = np.arange(16)[:, None] * 128 + np.arange(0, 128, 16)[None, :]
    got = swizzle_128b(rows)
    assert (got // 128 == rows // 128).all()  # a row stays in its row
    assert sorted(got[3] % 128 // 16) == list(range(8))  # its units permuted
    assert got[3, 0] % 128 // 16 == 3 and got[9, 5] % 128 // 16 == 5 ^ 1


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("release", "accessed since the last barrier"),  # refill of a slot still being read
        ("parity_flip", "deadlock"),  # parity 0 on the second lap around the ring
        ("wait", "before waiting on the mbarrier"),  # wgmma reads a copy no one waited for
    ],
)
def test_broken_pipelines_are_refused(flag, message):
    program = tma_matmul_program(**SMALL, **{flag: False})
    with pytest.raises(InterpreterError, match=message):
        interpret_product(program)


def _statements(program: ir.Program, kind):
    return [s for s in ir.iter_stmts(program.kernels[0].body) if isinstance(s, kind)]


def test_the_verifier_checks_the_announced_bytes_and_the_init_order():
    program = tma_matmul_program(**SMALL)
    _statements(program, ti.MbarrierExpectTx)[0].nbytes -= 2
    with pytest.raises(LoweringError, match="announces 16382 bytes, but its copies deliver 16384"):
        verify_program(program)
    program = tma_matmul_program(**SMALL)
    body = program.kernels[0].body
    assert isinstance(body, ir.Seq) and isinstance(body.stmts[1], ir.Barrier)
    del body.stmts[1]  # the barrier that makes the init visible
    with pytest.raises(LoweringError, match="no Barrier after its init"):
        verify_program(program)


def test_the_verifier_refuses_a_swizzled_box_of_other_than_128_byte_rows():
    program = tma_matmul_program(**SMALL)
    copy = _statements(program, ti.TmaLoad)[0]
    copy.map.box = (copy.map.box[0], 32)
    with pytest.raises(LoweringError, match="box rows of 64 bytes under the 128B swizzle"):
        verify_program(program)


def test_tensor_maps_follow_the_pointers_innermost_first():
    program = tma_matmul_program(**SMALL)
    maps = ti.tensor_maps(program.kernels[0])
    assert [m.buffer.name for m in maps] == ["A", "B"]
    assert maps[0].encoding() == ((200, 64), (400,), (64, 64))
    source = codegen_program(program)
    assert "float* __restrict__ C, const __grid_constant__ TmaDescriptor A_map, " in source


@needs_nvcc
def test_compiles_for_sm_90a_without_spills():
    program = tma_matmul_program(m=256, n=256, k=256, warpgroups=2, bn=128, slots=4)
    (res,) = compile_resources(codegen_program(program), arch="sm_90").values()
    assert res.spill_bytes == 0 and res.stack_bytes == 0


# static shared memory (one warpgroup, 2 slots: 32 KB) and dynamic (two warpgroups, 4 slots:
# 128 KB, the function attribute raised for it)
GPU_SHAPES = {
    "static_shared": {"m": 128, "n": 128, "k": 256, "warpgroups": 1, "bn": 64, "slots": 2},
    "dynamic_shared": {"m": 256, "n": 256, "k": 256, "warpgroups": 2, "bn": 128, "slots": 4},
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", list(GPU_SHAPES))
def test_gpu_matches_numpy(dtype, shape):
    assert_matches_numpy_on_gpu(tma_matmul_program(dtype=dtype, **GPU_SHAPES[shape]), dtype)


def test_the_build_launches_each_kernel_with_its_tensor_maps():
    from autosched.codegen.build import build_program

    built = build_program(tma_matmul_program(**SMALL))
    (launch,) = built.launches
    a, b = launch.tensor_maps
    assert (a.arg, a.dims, a.strides_bytes, a.box, a.swizzle) == (
        "A",
        (200, 64),
        (400,),
        (64, 64),
        "128B",
    )
    assert (b.arg, b.dims, b.box) == ("B", (64, 200), (64, 64))
