"""Padded shared-memory tiles: `storage_align` in lowering (autosched/lower/storage.py), the row
padding the Tensor Core init rule draws (autosched/sketch/tensor_core_init.py) and the one the
SharedPadding init rule draws for float32 sketches (autosched/sketch/shared_padding.py)."""

from __future__ import annotations

import collections
import math
import random

import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError, ScheduleError
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.lowering import lower
from autosched.lower.storage import aligned_stride, storage_shape
from autosched.lower.verify import verify_program
from autosched.records import MeasureInput, MeasureRecordResult, apply_steps, decode, encode
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import StorageAlignStep, replay
from autosched.search.mutations import MutationContext, TileSizeMutation
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.shared_padding import PAD_WEIGHTS, pad_options
from autosched.sketch.tensor_core_init import (
    MAX_BLOCK_TILES,
    TensorCoreDraw,
    fetch_vector,
    tensor_core_groups,
)
from autosched.sketch.utils import SketchParams
from autosched.sketch.validity import check_candidate
from autosched.task.evaluate import evaluate
from autosched.task.workloads import TENSOR_CORE_SUITE
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.interpreter_check import (
    assert_half_outputs_match,
    assert_matches_dag,
    half_inputs,
    lower_and_compare,
    random_inputs,
)
from tests.sketch.test_tensor_core_sketch import tc_dag
from tests.workloads_for_tests import matmul_dag, matmul_shared_state, suite_dag

# ---- storage_align in lowering ----------------------------------------------------------------


def test_storage_shape_pads_the_stride_of_the_aligned_dimension():
    assert aligned_stride(32, 16, 8) == 40 and aligned_stride(40, 16, 8) == 40
    assert aligned_stride(8, 32, 1) == 33
    assert storage_shape((32, 8), None) == (32, 8)
    assert storage_shape((32, 8), (0, 32, 1)) == (32, 33)
    assert storage_shape((64, 32), (0, 16, 8)) == (64, 40)
    assert storage_shape((2, 64, 32), (1, 16, 8)) == (2, 64, 40)
    assert storage_shape((64, 48), (0, 16, 0)) == (64, 48)  # already aligned
    with pytest.raises(LoweringError, match="not a whole extent"):
        storage_shape((4, 16, 32), (0, 16, 8))  # a stride of 520 is no whole row of 32
    with pytest.raises(LoweringError, match="not a whole extent"):
        storage_shape((4, 16), (1, 16, 8))  # the innermost dimension's stride is 1


def _with_align(state, stage: str, factor: int, offset: int):
    """`state` with storage_align(stage.ax0, factor, offset) recorded right after its
    existing one (before the fetches fuse ax0 away)."""
    steps = list(state.steps)
    at = next(k for k, s in enumerate(steps) if isinstance(s, StorageAlignStep)) + 1
    steps.insert(at, StorageAlignStep(state.stage_index(stage), 0, factor, offset))
    return replay(state.dag, steps)


def test_a_storage_aligned_shared_cache_is_padded_and_computes_the_dag():
    dag = matmul_dag(64, 64, 64)
    state = _with_align(matmul_shared_state(dag), "B.shared", 16, 8)
    assert state["A.shared"].storage_align == (0, 32, 1)
    assert state["B.shared"].storage_align == (0, 16, 8)
    program = lower_and_compare(dag, state)
    shared = {b.name: b.shape for k in program.kernels for b in k.allocs if b.scope == "shared"}
    # A.shared's region is 32 x 8 (rows of 8 padded to a stride of 33), B.shared's 8 x 32
    assert shared == {"A_shared": (32, 33), "B_shared": (8, 40)}
    assert "storage_align(B_shared_ax0, 16, 8)" in dag.print_python_schedule(state)


def test_storage_align_needs_one_of_the_ops_axes():
    dag = matmul_dag(64, 64, 64)
    state = dag.get_init_state().cache_write("C", "local")
    state = state.cache_read("A", "shared", ["C.local"]).compute_at("A.shared", "C.local", "j_c")
    fused = state.fuse("A.shared", ["ax0", "ax1"])
    with pytest.raises(ScheduleError, match="align one of the axes"):
        fused.storage_align("A.shared", "ax0_ax1_fused", 16, 8)
    assert state.storage_align("A.shared", "ax1", 16, 8)["A.shared"].storage_align == (1, 16, 8)


# ---- padded Tensor Core states -----------------------------------------------------------------


def _padded(state) -> set[int]:
    return {s.stage_id for s in state.steps if isinstance(s, StorageAlignStep)}


def _fragment_loads(program) -> list[ir.FragmentLoad]:
    return [
        s
        for k in program.kernels
        for s in ir.iter_stmts(k.body)
        if isinstance(s, ir.FragmentLoad) and s.src.buffer.scope == "shared"
    ]


def _sample(dag, n: int, seed: int):
    sampler = SketchSampler(generate_sketches(dag))
    states = sampler.sample(n, seed)
    assert len(states) == n, sampler.rejected
    return sampler, states


# workloads whose shared operand tiles hold the fragments' rows in their last dimension (NCHW
# data tiles are (n, c, 1, 1): their rows are the channels)
ROWS_LAST = [name for name in TENSOR_CORE_SUITE if name != "conv2d_nchw_fp16"]


@pytest.mark.parametrize("name", ROWS_LAST)
def test_padded_states_load_fragments_at_the_padded_stride_and_compute_the_dag(name):
    dag = tc_dag(name)
    sampler, states = _sample(dag, 8, 3)
    inputs = half_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    padded_loads = 0
    for state in states:
        program = sampler.programs[state.key()]
        verify_program(program)
        names = {state.stages[c].name.replace(".", "_") for c in _padded(state)}
        for load in _fragment_loads(program):
            shape = load.src.buffer.shape
            # every shared operand tile's rows are its last dimension; ldm is their stride
            assert load.src.ldm == shape[-1] and load.src.ldm % 8 == 0
            if load.src.buffer.name in names:
                assert shape[-1] % 16 == 8  # 16-wide tiles of rows plus 8 halves
                padded_loads += 1
            else:
                assert shape[-1] % 16 == 0
        assert_half_outputs_match(dag, program, inputs, expected)
    assert padded_loads > 0


def test_the_padding_replays_from_records():
    dag = tc_dag("matmul_fp16")
    _, states = _sample(dag, 8, 5)
    state = next(s for s in states if _padded(s))
    inp = MeasureInput(dag.workload_key, tuple(s.to_record() for s in state.steps))
    line = encode(inp, MeasureRecordResult((1e-5,), 0, "", 1.0, 0.5, 1.0))
    again = apply_steps(dag, decode(line)[0])
    assert again == state and _padded(again) == _padded(state)
    assert str(lower(again)) == str(lower(state))


def _full_matmul_fp32_out() -> ComputeDAG:
    A = te.placeholder((1024, 1024), name="A", dtype="float16")
    B = te.placeholder((1024, 1024), name="B", dtype="float16")
    return ComputeDAG([A, B, topi.matmul(A, B, out_dtype="float32")])


def _group(dag: ComputeDAG):
    (sketch,) = generate_sketches(dag)
    (g,) = tensor_core_groups(sketch)
    return g


def _block_tiles(state, g) -> tuple[int, int]:
    (wm, rm, _), (wn, rn, _) = (state.steps[k].lengths for k in g.split_ids[:2])
    return wm * rm * 16, wn * rn * 16


def test_the_tile_space_reaches_128x128_blocks_of_4_to_8_warps():
    """fp16 matmul 1024^3 with a float32 output (no epilogue tile in shared memory): block
    tiles up to 128 x 128, mostly 4 or 8 warps (warpgroup states: a warp per 16 rows, whole
    warpgroups), most shared stages padded, all within the opt-in shared memory."""
    dag = _full_matmul_fp32_out()
    sampler, states = _sample(dag, 60, 0)
    g = _group(dag)
    tiles = collections.Counter(_block_tiles(s, g) for s in states)
    plain, warpgroup = collections.Counter(), []  # warps a block, by instruction family
    for s in states:
        warps = sampler.programs[s.key()].kernels[0].threads_per_block // 32
        if '.tensor_core_instruction("wgmma")' in dag.print_python_schedule(s):
            warpgroup.append((warps, _block_tiles(s, g)[0]))
        else:
            plain[warps] += 1
    assert (128, 128) in tiles and max(max(t) for t in tiles) <= MAX_BLOCK_TILES * 16
    assert set(plain) <= {2, 4, 8} and plain[4] + plain[8] > 2 * plain[2]
    assert warpgroup and all(w % 4 == 0 and w * 16 == rows for w, rows in warpgroup)
    assert sum(len(_padded(s)) for s in states) > len(states)  # over half the stages
    limit = sampler.hardware.max_shared_memory_per_block_optin
    assert all(k.shared_bytes <= limit for s in states for k in sampler.programs[s.key()].kernels)


def test_shared_bytes_count_padding_and_only_a_real_epilogue():
    (sketch,) = generate_sketches(tc_dag("matmul_fp16", reduced=False))
    (g,) = tensor_core_groups(sketch)
    assert g.epilogue and g.row_axes == ("k", "n")
    d = TensorCoreDraw((4, 2), (2, 4), 2, (8, 8))  # 128 x 128, K 32
    operands = (128 * 40 + 32 * 136) * 2
    assert d.shared_bytes(g) == operands + 128 * 128 * 4
    g2 = _group(_full_matmul_fp32_out())
    assert not g2.epilogue and d.shared_bytes(g2) == operands
    # the cast epilogue's 64 KB float32 tile rules out 128 x 128 under a 48 KB opt-in limit
    small = HardwareParams(max_shared_memory_per_block_optin=48 * 1024)
    sampler = SketchSampler([sketch], small, verify=False)
    assert all(math.prod(_block_tiles(s, g)) < 128 * 128 for s in sampler.sample(50, 1))


@needs_nvcc
@pytest.mark.slow
def test_padded_full_size_states_compile_without_spills():
    from concurrent.futures import ThreadPoolExecutor

    from autosched.codegen.cuda import codegen_program
    from autosched.lower.device_passes import device_program
    from measure.builder import compile_resources

    dag = _full_matmul_fp32_out()
    sampler, states = _sample(dag, 40, 7)
    g = _group(dag)
    big = sorted(states, key=lambda s: -math.prod(_block_tiles(s, g)))
    picked = [s for s in big if _padded(s)][:4]
    assert math.prod(_block_tiles(picked[0], g)) >= 128 * 128
    jobs = [codegen_program(device_program(sampler.programs[s.key()])) for s in picked]
    reads = ("load_matrix_sync", "ldmatrix", "wgmma.mma_async")  # wmma, mma or wgmma
    assert all(any(r in src for r in reads) for src in jobs)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(compile_resources, jobs))
    assert not [r for res in results for r in res.values() if r.spill_bytes]


# ---- padded float32 states (the SharedPadding init rule) ---------------------------------------

EVERY_CACHE = SketchParams(shared_padding_probability=1.0)


def _stride_pads(state) -> dict[str, StorageAlignStep]:
    """Buffer name -> the storage_align step of each padded cache."""
    return {
        state.stages[s.stage_id].name.replace(".", "_"): s
        for s in state.steps
        if isinstance(s, StorageAlignStep)
    }


def _shared_shapes(program) -> dict[str, tuple]:
    return {b.name: b.shape for k in program.kernels for b in k.allocs if b.scope == "shared"}


@pytest.fixture(scope="module")
def fp32_sample():
    """12 states of the reduced float32 matmul drawn with every eligible cache padded."""
    dag = suite_dag("matmul", reduced=True)
    sampler, states = _sample_with(dag, EVERY_CACHE, 12, 0)
    return dag, sampler, states


def _sample_with(dag, params: SketchParams, n: int, seed: int, verify: bool = True):
    sampler = SketchSampler(generate_sketches(dag), params=params, verify=verify)
    states = sampler.sample(n, seed)
    assert len(states) == n, sampler.rejected
    return sampler, states


def test_the_pad_table_keeps_vectors_whole_and_pads_only_rows_it_spreads():
    assert pad_options(32, 4, 4) == {4: PAD_WEIGHTS[16]}  # 16-byte vectors: 16-byte pads only
    assert pad_options(32, 4, 1) == {4: PAD_WEIGHTS[16], 1: PAD_WEIGHTS[4]}
    assert pad_options(16, 4, 2) == {4: PAD_WEIGHTS[16]}
    assert pad_options(12, 4, 1) == {1: PAD_WEIGHTS[4]}  # 12 + 4 would spread the rows less
    assert pad_options(3, 4, 1) == {} and pad_options(1, 4, 1) == {}  # odd rows spread already
    assert pad_options(64, 2, 8) == {8: PAD_WEIGHTS[16]}  # halves: 16 bytes are 8 of them
    assert pad_options(64, 8, 1) == {2: PAD_WEIGHTS[16]}  # a 4-byte pad is no whole double


def test_padded_fp32_states_compute_the_dag(fp32_sample):
    dag, sampler, states = fp32_sample
    inputs = random_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    factors = collections.Counter()
    for state in states:
        factors.update(s.factor for s in _stride_pads(state).values())
        assert_matches_dag(dag, sampler.programs[state.key()], state, inputs, expected)
    assert sum(factors.values()) > len(states) and factors[8] > factors[2]


def test_padded_caches_get_the_padded_row_stride_and_keep_their_vectors(fp32_sample):
    """Each padded cache's allocation is its unpadded one with `offset` more elements per row
    (rows a multiple of `factor`), and a vectorised fetch still stores whole vectors (or copies
    them asynchronously)."""
    _, sampler, states = fp32_sample
    vectorised = 0
    for state in states:
        program = sampler.programs[state.key()]
        pads = _stride_pads(state)
        plain = replay(state.dag, [s for s in state.steps if not isinstance(s, StorageAlignStep)])
        padded, unpadded = _shared_shapes(program), _shared_shapes(lower(plain))
        source = codegen_program(device_program(program))
        for name, shape in padded.items():
            if name not in pads:
                assert shape == unpadded[name]
                continue
            step, row = pads[name], unpadded[name][-1]
            assert row % step.factor == 0
            assert shape == (*unpadded[name][:-1], row + step.offset)
            vector = fetch_vector(state, state.stage_index(name.replace("_", ".")))
            assert step.factor == 8 or vector == 1  # a 4-byte pad only under scalar copies
            if vector > 1:
                vectorised += 1
                stored = (f"float{vector}*>(&{name}[", f"as_cp_async_{4 * vector}(&{name}[")
                assert any(s in source for s in stored), name
    assert vectorised


def test_probability_zero_pads_no_fp32_cache():
    dag = suite_dag("matmul", reduced=True)
    _, states = _sample_with(dag, SketchParams(shared_padding_probability=0.0), 12, 0, False)
    assert not any(_padded(s) for s in states)


def test_fp32_padding_replays_prints_and_survives_tile_size_mutations(fp32_sample):
    dag, sampler, states = fp32_sample
    state = next(s for s in states if len(_padded(s)) == 2)
    inp = MeasureInput(dag.workload_key, tuple(s.to_record() for s in state.steps))
    line = encode(inp, MeasureRecordResult((1e-5,), 0, "", 1.0, 0.5, 1.0))
    assert apply_steps(dag, decode(line)[0]) == state
    text = dag.print_python_schedule(state)
    for name, step in _stride_pads(state).items():
        assert f"s[{name}].storage_align({name}_ax0, {step.factor}, {step.offset})" in text
    p = SketchParams()
    ctx = MutationContext(
        p.max_innermost_split_factor, max(p.vector_lengths), p.auto_unroll_configs
    )
    rng, inputs = random.Random(0), random_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    checked = 0
    for _ in range(12):
        child = replay(dag, TileSizeMutation().apply(ctx, [state.key()], rng))
        assert _padded(child) == _padded(state)
        program, reason = check_candidate(child, sampler.hardware, p)
        if program is not None:
            assert_matches_dag(dag, program, child, inputs, expected)
            checked += 1
    assert checked


def test_tensor_core_states_are_left_to_their_own_padding():
    """The rule draws nothing on a Tensor Core sketch: the same states whatever its
    probability, each operand tile aligned once (by FillTensorCore)."""
    dag = tc_dag("matmul_fp16")
    _, never = _sample_with(dag, SketchParams(shared_padding_probability=0.0), 6, 3, False)
    _, always = _sample_with(dag, EVERY_CACHE, 6, 3, False)
    assert [s.key() for s in always] == [s.key() for s in never]
    assert any(_padded(s) for s in always)
    for state in always:
        aligned = [s.stage_id for s in state.steps if isinstance(s, StorageAlignStep)]
        assert len(aligned) == len(set(aligned))


@needs_nvcc
def test_a_padded_double_buffered_fp32_state_compiles_for_sm90():
    from measure.compiler import compile_kernel

    dag = suite_dag("matmul", reduced=True)
    params = SketchParams(shared_padding_probability=1.0, double_buffer_probability=1.0)
    sampler, states = _sample_with(dag, params, 8, 1)
    state = next(
        s
        for s in states
        if len(_padded(s)) == 2
        and any(b.async_copy for k in sampler.programs[s.key()].kernels for b in k.allocs)
    )
    source = codegen_program(device_program(sampler.programs[state.key()]))
    assert "cp_async" in source
    _, message, cubin, resources = compile_kernel(source, "sm_90")
    assert cubin is not None, message
    assert not any(r.spill_bytes for r in resources.values())
