"""The "mma" fragment flavour: per-lane registers, `ldmatrix` and `mma.sync` m16n8k16.

The layout tables against the PTX ISA's definitions (`lower/mma_layout.py`); hand-built warp
programs (tests/lower/test_warp_ir.py's) with mma fragments on the CPU interpreter against numpy,
for every operand layout, and with deliberately wrong lane mappings that the interpreter must
catch; the interpreter's and the verifier's rules; the printed PTX (golden lines, nvcc for sm_90
without spills); the schedule step, lowering and the init rule that draws the flavour; sampled
states (padded extents, batch_matmul) on the interpreter; the GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError, ScheduleError
from autosched.lower import ir
from autosched.lower import mma_layout as ml
from autosched.lower.interpreter import InterpreterError, run_program
from autosched.lower.lowering import lower
from autosched.lower.verify import verify_program
from autosched.schedule.stage import TENSOR_CORE_INSTRUCTIONS
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.interpreter_check import assert_half_outputs_match, half_inputs
from tests.lower import test_tensorize as tz
from tests.lower.test_warp_ir import operands, run_cpu, tile, wmma_program

LAYOUTS = ["row_major", "col_major"]


def as_mma(program: ir.Program) -> ir.Program:
    """`program` with every fragment of the mma flavour."""
    for k in program.kernels:
        for b in k.allocs:
            if b.scope in ir.FRAGMENT_SCOPES:
                b.fragment_flavour = "mma"
    return program


def mma_program(dtype="float16", layout_a="row_major", layout_b="row_major") -> ir.Program:
    return as_mma(wmma_program(dtype, layout_a, layout_b, shared=True))


def product(program: ir.Program, dtype: str, layout_a: str, layout_b: str):
    a, b, ref = operands(dtype, layout_a, layout_b)
    return run_cpu(program, a, b), ref


# ---- the layout tables ---------------------------------------------------------------------


def test_fragment_layouts_are_the_ptx_isa_ones():
    # spot values of the ISA's figures for m16n8k16 (.f16 / .bf16) and ldmatrix
    assert ml.A_ELEMENT[0].at(5) == (1, 2) and ml.A_ELEMENT[3].at(5) == (9, 3)
    assert ml.A_ELEMENT[6].at(31) == (15, 14)
    assert ml.B_ELEMENT[0].at(6) == (4, 1) and ml.B_ELEMENT[3].at(6) == (13, 1)
    assert ml.C_ELEMENT[1].at(9) == (2, 3) and ml.C_ELEMENT[2].at(9) == (10, 2)
    assert ml.ldmatrix_element(13, 1, trans=False) == (3, 3)
    assert ml.ldmatrix_element(6, 0, trans=True) == (4, 1)
    for table, shape in (
        (ml.A_ELEMENT, (16, 16)),
        (ml.B_ELEMENT, (16, 8)),
        (ml.C_ELEMENT, (16, 8)),
    ):
        seen = {p.at(lane) for p in table for lane in range(32)}
        assert len(seen) == shape[0] * shape[1] == 32 * len(table)  # each element once


def test_tile_positions_cover_each_16x16_tile_once():
    for scope in ir.FRAGMENT_SCOPES:
        seen = {ml.tile_position(scope, e).at(lane) for e in range(8) for lane in range(32)}
        assert seen == {(r, c) for r in range(16) for c in range(16)}


def test_flavour_names_agree_between_schedule_and_ir():
    from autosched.lower.verify import FRAGMENT_DTYPES

    # every instruction family is a fragment flavour, but wgmma's (its accumulators are mma's)
    assert TENSOR_CORE_INSTRUCTIONS == (*ir.FRAGMENT_FLAVOURS, ir.WGMMA_FLAVOUR)
    for scope in ir.OPERAND_SCOPES:  # every operand fragment dtype has an mma shape
        assert set(FRAGMENT_DTYPES[scope]) == set(ml.SHAPES) == set(ml.MMA_TYPES)


# ---- interpreter ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
def test_interpreter_matches_numpy(dtype, layout_a, layout_b):
    program = mma_program(dtype, layout_a, layout_b)
    verify_program(program)
    got, ref = product(program, dtype, layout_a, layout_b)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def direct_store_program(dtype="float16") -> ir.Program:
    """`mma_program` whose accumulator tiles are stored straight to global C (float2 stores
    of each lane's pairs) instead of through shared memory."""
    program = mma_program(dtype)
    k, (_, _, C) = program.kernels[0], program.params
    stmts = list(k.body.stmts)
    at = next(i for i, s in enumerate(stmts) if isinstance(s, ir.FragmentStore))
    store = stmts[at]
    stmts[at] = ir.FragmentStore(tile(C, store.dst.offset, store.dst.ldm), store.frag, store.tile)
    k.body = ir.seq(stmts[: at + 1])  # the copy-out of C_shared goes
    return program


def test_accumulators_stored_to_global_memory():
    program = direct_store_program()
    verify_program(program)
    got, ref = product(program, "float16", "row_major", "row_major")
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


WRONG_CHOICES = {
    # matrices 1 and 2 of the x4 load swapped: registers a2a3 / a4a5 get each other's values
    "matrix order": ("MATRIX_ORIGINS", ((0, 0), (0, 8), (8, 0), (8, 8))),
    # B stored K x N loaded without .trans (and A with it)
    "transpose": ("ldmatrix_trans", lambda scope, layout: not _trans(scope, layout)),
    # the second mma of a tile fed the first 8 columns of B again
    "b registers": ("operand_b_regs", lambda n_half: (0, 1)),
}
_trans = ml.ldmatrix_trans


@pytest.mark.parametrize("case", sorted(WRONG_CHOICES))
def test_a_wrong_lane_mapping_computes_a_wrong_product(case, monkeypatch):
    name, wrong = WRONG_CHOICES[case]
    program = mma_program("float16", "row_major", "row_major")
    got, ref = product(program, "float16", "row_major", "row_major")
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(ml, name, wrong)
    got, ref = product(mma_program(), "float16", "row_major", "row_major")
    assert not np.allclose(got, ref, rtol=1e-3, atol=1e-3)


def _with_load_a(buffer_of, offset) -> ir.Program:
    """`mma_program()` with one more load of matrix_a, from `buffer_of(program)` at `offset`."""
    program = mma_program()
    k = program.kernels[0]
    a_frag = k.allocs[0]
    load = ir.FragmentLoad(a_frag, ir.int32(0), tile(buffer_of(program, k), offset, 32))
    k.body = ir.seq([*k.body.stmts, load])
    return program


def test_interpreter_rejects_ldmatrix_from_global_and_misaligned_rows():
    a, b, _ = operands("float16", "row_major", "row_major")
    program = _with_load_a(lambda p, k: p.params[0], 0)
    with pytest.raises(InterpreterError, match=r"mma tiles are in \('shared',\) memory"):
        run_cpu(program, a, b)
    program = _with_load_a(lambda p, k: k.allocs[3], 4)  # A_shared, 8 bytes in
    with pytest.raises(InterpreterError, match="offset 4 into A_shared is not 16-byte aligned"):
        run_cpu(program, a, b)
    program = _with_load_a(lambda p, k: k.allocs[3], 8)  # 16 bytes: a valid ldmatrix row
    run_cpu(program, a, b)


# ---- verifier ------------------------------------------------------------------------------


def _verify_error(program: ir.Program) -> str | None:
    try:
        verify_program(program)
    except LoweringError as exc:
        return str(exc)
    return None


def test_verifier_rules():
    assert _verify_error(mma_program()) is None
    from_global = _with_load_a(lambda p, k: p.params[0], 0)
    assert "mma tile of A in global memory" in str(_verify_error(from_global))
    misaligned = _with_load_a(lambda p, k: k.allocs[3], ir.THREAD_VARS["threadIdx.y"] * 4)
    assert "not provably a multiple of 16 bytes" in str(_verify_error(misaligned))
    mixed = mma_program()
    mixed.kernels[0].allocs[2].fragment_flavour = "wmma"  # the accumulator
    assert "fragments of the flavours ['mma', 'wmma'] in one statement" in str(_verify_error(mixed))
    unknown = mma_program()
    unknown.kernels[0].allocs[2].fragment_flavour = "hmma"
    assert "has flavour 'hmma'" in str(_verify_error(unknown))


# ---- CUDA printer --------------------------------------------------------------------------


def test_printer_golden_lines():
    source = codegen_program(mma_program("bfloat16", "row_major", "row_major"))
    lines = [line.strip() for line in source.splitlines()]
    lane = "((int)threadIdx.x)"
    expected = [
        "unsigned A_frag[1][4];",
        "unsigned B_frag[1][4];",
        "float C_frag[1][8];",
        "for (int mma_e = 0; mma_e < 8; ++mma_e) C_frag[0][mma_e] = 0.000000000e+00f;",
        # A row-major: no .trans; lane l gives row l % 16 of the tile, columns from 8 (l / 16)
        'asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n" : '
        '"=r"(A_frag[0][0]), "=r"(A_frag[0][1]), "=r"(A_frag[0][2]), "=r"(A_frag[0][3]) : '
        '"r"(static_cast<unsigned>(__cvta_generic_to_shared(&A_shared[((((((((int)threadIdx.y) '
        f"/ 2) * 512) + (k * 16)) + (({lane} % 8) * 32)) + ((({lane} / 8) % 2) * 256)) + "
        f"(({lane} / 16) * 8))]))));",
        'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, '
        '{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n" : "+f"(C_frag[0][4]), '
        '"+f"(C_frag[0][5]), "+f"(C_frag[0][6]), "+f"(C_frag[0][7]) : "r"(A_frag[0][0]), '
        '"r"(A_frag[0][1]), "r"(A_frag[0][2]), "r"(A_frag[0][3]), "r"(B_frag[0][2]), '
        '"r"(B_frag[0][3]));',
    ]
    for line in expected:
        assert line in lines, (line, source)
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in source  # B stored K x N
    assert source.count("*reinterpret_cast<float2*>(&C_shared[") == 4
    col = codegen_program(mma_program("float16", "col_major", "col_major"))
    assert col.count(".x4.trans.") == 1 and "f32.f16.f16.f32" in col  # A stored K x M


def test_printer_rejects_ldmatrix_from_global():
    with pytest.raises(LoweringError, match="mma fragments load .* from shared memory"):
        codegen_program(_with_load_a(lambda p, k: p.params[0], 0))


def _compile_ok(program: ir.Program) -> str:
    source = codegen_program(program)
    for name, res in compile_resources(source, arch="sm_90").items():
        assert res.spill_bytes == 0 and res.stack_bytes == 0, (name, res, source)
    return source


@needs_nvcc
def test_nvcc_compiles_without_spills():
    _compile_ok(mma_program("bfloat16", "col_major", "row_major"))
    _compile_ok(direct_store_program("float16"))
    _compile_ok(mma_program("float32", "row_major", "col_major"))


# ---- schedule, lowering, init rule ---------------------------------------------------------


def mma_state(make=tz.matmul_state):
    dag, state = make()
    acc = next(s.name for s in state.stages if s.scope == ir.ACCUMULATOR_SCOPE)
    return dag, state.tensor_core_instruction(acc, "mma")


def test_the_step_gives_the_fragments_their_flavour_and_prints():
    dag, state = mma_state()
    assert 's[T_matmul_wmma_accumulator].tensor_core_instruction("mma")' in (
        dag.print_python_schedule(state)
    )
    program = lower(state)
    frags = [b for k in program.kernels for b in k.allocs if b.scope in ir.FRAGMENT_SCOPES]
    assert len(frags) == 3 and {b.fragment_flavour for b in frags} == {"mma"}
    tz.run_and_compare(dag, program)
    with pytest.raises(ScheduleError, match="only an accumulator stage"):
        state.tensor_core_instruction("T_matmul", "mma")
    with pytest.raises(ScheduleError, match="unknown instruction family 'hmma'"):
        state.tensor_core_instruction("T_matmul.wmma.accumulator", "hmma")


@pytest.mark.parametrize("make", [tz.batch_matmul_state, lambda: tz.matmul_state(epilogue=True)])
def test_lowered_mma_programs_match_numpy(make):
    dag, state = mma_state(make)
    tz.run_and_compare(dag, lower(state))


def test_tf32_products_through_mma_match_the_wmma_emulation():
    """m16n8k8 .tf32: each lane's own values, rounded to TF32, against the tile-level wmma
    emulation (an independent definition of the same product) for every operand layout."""
    for layout_a in LAYOUTS:
        for layout_b in LAYOUTS:
            a, b, _ = operands("float32", layout_a, layout_b)
            wmma = run_cpu(wmma_program("float32", layout_a, layout_b, shared=True), a, b)
            mma = run_cpu(mma_program("float32", layout_a, layout_b), a, b)
            np.testing.assert_array_equal(mma, wmma)
    source = codegen_program(mma_program("float32"))
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in source
    assert source.count('asm("cvt.rna.tf32.f32 %0, %1;') == 8 and "ldmatrix" not in source


def test_sampled_tf32_states_through_mma():
    from autosched.te.dtype import round_tf32
    from tests.codegen.test_tf32 import tf32_task

    params = SketchParams(allow_tf32=True, tensor_core_instructions=("mma",))
    task = tf32_task()
    sketches = generate_sketches(task.compute_dag, task.hardware_params, params)
    sampler = SketchSampler(sketches, params=params)
    (state,) = sampler.sample(1, 0)
    program = sampler.programs[state.key()]
    assert _flavours(program) == {"mma"}
    rng = np.random.default_rng(1)
    A, B = (rng.uniform(-1, 1, (64, 64)).astype(np.float32) for _ in range(2))
    ref = (round_tf32(A).astype(np.float64) @ round_tf32(B).astype(np.float64)).astype(np.float32)
    out = {"A": A, "B": B, "T_matmul": np.zeros((64, 64), np.float32)}
    run_program(program, out)
    np.testing.assert_allclose(out["T_matmul"], ref, rtol=1e-5, atol=1e-5)


def _sample(dag, instructions, n):
    params = SketchParams(tensor_core_instructions=instructions)
    sampler = SketchSampler(generate_sketches(dag), params=params)
    states = sampler.sample(n, 1)
    assert len(states) == n, sampler.rejected
    return sampler, states


def _flavours(program: ir.Program) -> set[str]:
    return {
        b.fragment_flavour
        for k in program.kernels
        for b in k.allocs
        if b.scope in ir.FRAGMENT_SCOPES
    }


def test_the_init_rule_draws_the_instructions():
    dag = tz.matmul_dag()
    sampler, states = _sample(dag, ("wmma",), 2)
    assert all(_flavours(sampler.programs[s.key()]) == {"wmma"} for s in states)
    sampler, states = _sample(dag, ("wmma", "mma"), 6)
    drawn = [frozenset(_flavours(sampler.programs[s.key()])) for s in states]
    assert set(drawn) == {frozenset({"wmma"}), frozenset({"mma"})}
    with pytest.raises(ValueError, match="tensor_core_instructions"):
        SketchParams(tensor_core_instructions=("hmma",))


@pytest.mark.parametrize(
    "name, args",
    [("matmul_fp16", (40, 56, 24)), ("batch_matmul_bf16", (2, 21, 32, 24))],
    ids=["matmul_fp16_padded", "batch_matmul_bf16_padded"],
)
def test_sampled_mma_states_compute_the_dag_on_the_interpreter(name, args):
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag(name, args=args)
    sampler, states = _sample(dag, ("mma",), 2)
    inputs = half_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    for state in states:
        program = sampler.programs[state.key()]
        assert _flavours(program) == {"mma"}
        assert_half_outputs_match(dag, program, inputs, expected)


@needs_nvcc
def test_a_full_size_mma_state_compiles_without_spills():
    from autosched.lower.device_passes import device_program
    from tests.sketch.test_tensor_core_sketch import tc_dag

    sampler, (state,) = _sample(tc_dag("matmul_fp16", reduced=False), ("mma",), 1)
    source = _compile_ok(device_program(sampler.programs[state.key()]))
    assert "mma.sync.aligned.m16n8k16" in source and "ldmatrix" in source


# ---- GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "layout_a, layout_b", [("row_major", "row_major"), ("col_major", "col_major")]
)
def test_gpu_matches_numpy(dtype, layout_a, layout_b):
    from autosched.codegen.build import build_program

    program = mma_program(dtype, layout_a, layout_b)
    a, b, ref = operands(dtype, layout_a, layout_b)
    c = np.full((32, 32), np.nan, np.float32)
    build_program(program)(a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    c = np.full((32, 32), np.nan, np.float32)
    build_program(direct_store_program(dtype))(*operands(dtype, "row_major", "row_major")[:2], c)
    np.testing.assert_allclose(
        c, operands(dtype, "row_major", "row_major")[2], rtol=1e-5, atol=1e-5
    )


# ---- features ------------------------------------------------------------------------------


def test_accumulator_position_formula_is_the_table():
    for lane in range(32):
        for e in range(8):
            want = ml.tile_position(ir.ACCUMULATOR_SCOPE, e).at(lane)
            assert ml.accumulator_position(lane, e) == want


def test_features_see_the_flavours_access_patterns():
    from autosched.features import FEATURE_NAMES, extract_features

    wmma, mma = (extract_features(p) for p in (wmma_program(shared=True), mma_program()))
    assert wmma.shape == mma.shape == (8, len(FEATURE_NAMES)) and np.isfinite(mma).all()
    tx_stride = [k for k, name in enumerate(FEATURE_NAMES) if name.endswith(".tx_stride")]
    load_a, store = 3, 6  # the walk's statements: as test_warp_ir's feature test lists them
    assert not np.array_equal(wmma[load_a, tx_stride], mma[load_a, tx_stride])
    assert not np.array_equal(wmma[store, tx_stride], mma[store, tx_stride])
    same = [k for k, name in enumerate(FEATURE_NAMES) if not name.startswith("B")]
    np.testing.assert_array_equal(wmma[5, same], mma[5, same])  # the mma: the same work


def test_padded_rows_make_ldmatrix_conflict_free():
    # the sketch pads 16-bit operand rows by 8 elements (16 bytes): odd multiples of 16 bytes
    for row in (16, 32, 64, 128):
        for layout in LAYOUTS:
            assert ml.ldmatrix_conflict_ways(layout, row + 8, 2) == 1
    assert ml.ldmatrix_conflict_ways("row_major", 32, 2) == 4
    assert ml.ldmatrix_conflict_ways("col_major", 64, 2) == 8
