"""Cross-block reductions (sketch/rules.py `CrossBlockReduction`) and reductions read in vectors
(`CrossThreadReduction.vector_lanes`, printed by codegen/vectors.py): a reduction with too few
outputs for the GPU is cut into parts (rfactor) whose partial sums fill the SMs, and a
cross-thread reduction may read 16 bytes of its reduction per thread. Sampled states lower to
two kernels and compute the DAG on the CPU interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.features import N_FEATURES, extract_features
from autosched.lower import ir
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import REDUCE, SPATIAL
from autosched.schedule.steps import print_python_schedule, replay
from autosched.sketch import SketchSampler, generate_sketches, sketch_context
from autosched.sketch.params import SketchParams
from autosched.sketch.parts_in_consumer import sums_parts_inside
from autosched.sketch.rules import CrossBlockReduction
from autosched.sketch.utils import unread_axes
from autosched.sketch.validity import vector_bytes
from measure.hardware import HardwareParams
from tests.interpreter_check import interpret_and_compare


def sum_of_squares(m: int, n: int) -> ComputeDAG:
    """The squared 2-norm of a whole matrix, kept as a (1,) tensor, and its square root."""
    a = te.placeholder((m, n), name="A")
    i, j = te.reduce_axis((0, m), name="i"), te.reduce_axis((0, n), name="j")
    s = te.compute((1,), lambda z: te.sum(a[i, j] * a[i, j], axis=[i, j]), name="s")
    return ComputeDAG([a, te.compute((1,), lambda z: te.sqrt(s[z]), name="norm")])


def column_sum(m: int, n: int) -> ComputeDAG:
    a = te.placeholder((m, n), name="A")
    i = te.reduce_axis((0, m), name="i")
    return ComputeDAG([a, te.compute((n,), lambda j: te.sum(a[i, j], axis=i), name="s")])


def gemv(n: int, k: int, dtype: str) -> ComputeDAG:
    """y[n] = sum_k W[n, k] * x[k], summed in float32."""
    w, x = (
        te.placeholder((n, k), name="W", dtype=dtype),
        te.placeholder((k,), name="x", dtype=dtype),
    )
    r = te.reduce_axis((0, k), name="k")
    y = te.compute(
        (n,),
        lambda i: te.sum(te.cast(w[i, r], "float32") * te.cast(x[r], "float32"), axis=r),
        name="y",
    )
    return ComputeDAG([w, x, y])


def parts(sketch) -> int | None:
    """P of a cross-block sketch (the extent of its partial sums' first axis), else None."""
    rf = [st for st in sketch.stages if st.origin == "rfactor"]
    return rf[0].op.axis[0].extent if rf else None


# the two-kernel form of a cross-block reduction (tests/sketch/test_single_pass.py: the other)
TWO_KERNELS = SketchParams(cross_block_single_pass=0)

ONE_SM = HardwareParams(num_sms=1)  # a GPU that 8 rows fill with a warp per SM each


def on_warps(sketch) -> bool:
    """Does some stage of the sketch put its rows on a block's warps (threadIdx.y)?"""
    return any(it.annotation == "threadIdx.y" for st in sketch.stages for it in st.iters)


def reduction_stage(dag: ComputeDAG, name: str):
    return next(st for st in dag.get_init_state().stages if st.name == name)


@pytest.mark.parametrize(
    "dag, name, sms, expected",
    [
        (sum_of_squares(4096, 4096), "s", 132, 512),  # 264 blocks wanted, a power of two above
        (sum_of_squares(64, 64), "s", 132, 64),  # parts of at least 64 elements
        (column_sum(4096, 4096), "s", 132, 32),  # 4096 columns: 67,584 threads wanted
        (column_sum(4096, 1 << 20), "s", 132, 0),  # a million columns fill the GPU
        (gemv(4096, 4096, "float16"), "y", 132, 0),  # one row per block: 4096 blocks
        (gemv(64, 4096, "float16"), "y", 132, 8),  # 64 rows: 8 parts each
        (gemv(64, 4096, "float16"), "y", 16, 0),  # a small GPU: 64 blocks fill it
    ],
)
def test_parts_come_from_the_outputs_against_the_sms(dag, name, sms, expected):
    ctx = sketch_context(HardwareParams(num_sms=sms))
    assert CrossBlockReduction().parts(ctx, reduction_stage(dag, name)) == expected


def test_no_parts_when_switched_off():
    params = SketchParams(cross_block_blocks_per_sm=0, cross_block_threads_per_sm=0)
    assert not any(map(parts, generate_sketches(sum_of_squares(64, 64), params=params)))


def test_matrix_norm_sketches_cut_rows_into_parts_and_compute_it():
    """64 parts of one row each: the partial sums are a cross-thread reduction per part (in
    vectors of 4 floats or not), the final sum of the 64 parts a small cross-thread reduction
    or a loop; kernels that compute the norm on the interpreter."""
    dag = sum_of_squares(64, 64)
    split = [s for s in generate_sketches(dag) if parts(s)]
    assert {parts(s) for s in split} == {64}
    rf = split[0]["s.rf"]
    assert sorted(a.name for a in rf.op.reduce_axis) == ["i_i", "j"]  # the rows alone are cut
    vectorised = [s for s in split if any(it.annotation == "vectorize" for it in s["s.rf"].iters)]
    assert vectorised
    sampler = SketchSampler(split, params=TWO_KERNELS)
    states = sampler.sample(6, 0)
    assert len(states) == 6, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        # the final sum inside the square root's kernel, or (a loop) a kernel of its own
        assert len(program.kernels) == 1 + len(program.temps)
        assert program.temps[0].name == "s_rf"
        first = program.kernels[0]
        if any(isinstance(n, ir.AllReduce) for n in ir.iter_stmts(first.body)):
            assert first.grid[0] == 64  # one block per part
        interpret_and_compare(dag, program, rtol=1e-4)
    # a part's rows are read in order (the cut axis's rest first): 4 floats per thread at once
    sampler = SketchSampler(vectorised, params=TWO_KERNELS)
    (state,) = sampler.sample(1, 0)
    assert "float4 vec" in codegen_program(sampler.programs[state.key()])
    text = print_python_schedule(states[0])
    assert "s.rfactor(" in text and "nparts=64" in text
    assert replay(dag, states[0].steps) == states[0]


def test_column_sums_are_cut_into_parts_of_rows_one_thread_per_column_and_part():
    dag = column_sum(256, 64)  # 64 columns: 4 parts of 64 rows
    split = [s for s in generate_sketches(dag) if parts(s)]
    assert {parts(s) for s in split} == {4}
    sampler = SketchSampler(split, params=TWO_KERNELS)
    states = sampler.sample(4, 1)
    assert states, sampler.rejected
    serial = 0
    for state in states:
        program = sampler.programs[state.key()]
        assert len(program.kernels) == 2
        interpret_and_compare(dag, program, rtol=1e-4)
        serial += not any(
            isinstance(n, ir.AllReduce) for n in ir.iter_stmts(program.kernels[0].body)
        )
    assert serial  # the partial sums of some state run one thread per (part, column)


@pytest.mark.parametrize("dtype, lanes", [("float16", 8), ("float32", 4)])
def test_matrix_vector_product_reads_16_bytes_per_thread(dtype, lanes):
    """The cross-thread sketch whose threads each read `lanes` consecutive reduction steps:
    the weight and vector read as one 16-byte vector each, the sum taken lane by lane."""
    dag = gemv(8, 512, dtype)
    (vec,) = [
        s
        for s in generate_sketches(dag)
        if any(it.annotation == "vectorize" for it in s["y"].iters)
    ]
    sampler = SketchSampler([vec])
    states = sampler.sample(3, 0)
    assert states, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        assert vector_bytes(program.kernels[0].body) == 16
        source = codegen_program(program)
        vtype = "uint4" if dtype == "float16" else "float4"
        assert source.count(f"{vtype} vec") == 2, source  # W and x, once per step of the loop
        interpret_and_compare(dag, program, rtol=1e-3 if dtype == "float16" else 1e-4)


def test_a_reduction_vector_counts_the_bytes_of_its_loads():
    """A vector loop of reduction steps stores one float per step (the accumulator): its width
    is that of what it reads, 8 halves = 16 bytes, not 8 floats."""
    dag = gemv(4, 256, "float16")
    (vec,) = [
        s
        for s in generate_sketches(dag)
        if any(it.annotation == "vectorize" for it in s["y"].iters)
    ]
    sampler = SketchSampler([vec])
    (state,) = sampler.sample(1, 0)
    assert vector_bytes(sampler.programs[state.key()].kernels[0].body) == 16


def rms_norm(m: int, n: int) -> ComputeDAG:
    x, w = te.placeholder((m, n), name="x"), te.placeholder((n,), name="w")
    k = te.reduce_axis((0, n), name="k")
    ms = te.compute((m,), lambda i: te.sum(x[i, k] * x[i, k] * (1.0 / n), axis=k), name="ms")
    out = te.compute((m, n), lambda i, j: x[i, j] * te.rsqrt(ms[i] + 1e-6) * w[j], name="rms")
    return ComputeDAG([x, w, out])


def test_a_row_normalisation_reads_and_stores_16_bytes_per_thread():
    """RMSNorm in one kernel per row whose reduction reads, and whose output stores, 4 floats
    per thread: the reduction follows the output's [threads, lanes] split."""
    dag = rms_norm(4, 256)
    (fused,) = [
        s
        for s in generate_sketches(dag)
        if any(it.annotation == "vectorize" for it in s["rms"].iters)
        and not parts(s)
        and not any(st.origin == "cache_read" for st in s.stages)  # the row in shared / registers
    ]
    assert [it.annotation for it in fused["ms"].iters][-2:] == ["threadIdx.x", "vectorize"]
    sampler = SketchSampler([fused])
    states = sampler.sample(3, 0)
    assert states, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        (kernel,) = program.kernels
        source = codegen_program(program)
        assert "float4 vec" in source and "*reinterpret_cast<float4*>(&rms[" in source, source
        interpret_and_compare(dag, program, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_element_wise_stages_may_give_each_thread_a_16_byte_vector(dtype):
    """ThreadBind draws, for an element-wise output, one vector of consecutive elements per
    thread or none: the vector ones store (and read x) 16 bytes at once."""
    x = te.placeholder((8, 64), name="x", dtype=dtype)
    b = te.placeholder((64,), name="b", dtype=dtype)
    dag = ComputeDAG([x, b, te.compute((8, 64), lambda i, j: x[i, j] * b[j] + x[i, j], name="y")])
    sampler = SketchSampler(generate_sketches(dag))
    widths = set()
    for state in sampler.sample(12, 0):
        program = sampler.programs[state.key()]
        widths.add(vector_bytes(program.kernels[0].body))
        interpret_and_compare(dag, program, rtol=1e-3)
        if vector_bytes(program.kernels[0].body):
            vtype = "uint4" if dtype == "float16" else "float4"
            assert f"*reinterpret_cast<{vtype}*>(&y[" in codegen_program(program)
    assert widths == {0, 16}


def row_sums(shape: tuple[int, ...]) -> ComputeDAG:
    """The sum of each row (last axis) of a tensor of `shape`."""
    a = te.placeholder(shape, name="A")
    k = te.reduce_axis((0, shape[-1]), name="k")
    return ComputeDAG(
        [a, te.compute(shape[:-1], lambda *idx: te.sum(a[(*idx, k)], axis=k), name="rows")]
    )


@pytest.mark.parametrize(
    "shape, vector",
    [((16, 256), "float4 vec"), ((2, 8, 256), "float4 vec"), ((16, 48), None)],
)
def test_many_short_rows_may_be_summed_a_warp_per_row(shape, vector):
    """The row sums' outputs on a block's warps (threadIdx.y), each row a warp reduction by
    shuffles, no shared memory or barrier; 4 floats a lane at once where every lane has a
    vector of the row (256), else one float (48: 32 lanes, the last 16 steps guarded)."""
    dag = row_sums(shape)
    sketches = generate_sketches(dag, ONE_SM)
    (warps,) = [s for s in sketches if on_warps(s) and rows_per_warp(s) == 1 and not streamed(s)]
    sampler = SketchSampler([warps], ONE_SM)
    states = sampler.sample(4, 0)
    assert len(states) == 4, sampler.rejected
    rows = 1
    for n in shape[:-1]:
        rows *= n
    for state in states:
        program = sampler.programs[state.key()]
        (kernel,) = program.kernels
        assert kernel.block[0] == 32 and kernel.grid[0] * kernel.block[1] == rows
        source = codegen_program(program)
        assert "__shfl_xor_sync" in source and "__syncthreads" not in source, source
        assert (vector in source) if vector else "vec" not in source, source
        interpret_and_compare(dag, program, rtol=1e-4)
        features = extract_features(program)  # what the cost model sees of it
        assert features.shape[1] == N_FEATURES and np.isfinite(features).all()
    assert replay(dag, states[0].steps) == states[0]


def streamed(sketch) -> bool:
    """Does some stage of the sketch read its inputs with streaming loads (`stream_reads`)?"""
    return any(st.stream_reads for st in sketch.stages)


def rows_per_warp(sketch) -> int:
    """The rows each warp of a warp-per-row sketch sums: the extent of the spatial loop inside
    its reduction (1 when there is none)."""
    its = sketch["rows"].iters
    first_reduce = next(n for n, it in enumerate(its) if it.kind == REDUCE)
    inner = [it.extent for it in its[first_reduce:] if it.kind == SPATIAL]
    return inner[0] if inner else 1


@pytest.mark.parametrize("shape, wanted", [((64, 256), (1, 2, 4)), ((16, 96), (1, 2))])
def test_a_warp_may_sum_several_rows_at_once(shape, wanted):
    """A row sum also gets sketches with 2 and 4 rows per warp (as long as the rows still
    give every SM `MIN_WARPS_PER_SM` warps): each lane keeps one partial sum per row, its
    loads of all the rows inside the reduction's steps (issued together), then a warp
    reduction per row. Vectors of 4 floats for 256; one float for 96 (32 lanes, 3 steps)."""
    dag = row_sums(shape)
    sketches = [s for s in generate_sketches(dag, ONE_SM) if on_warps(s) and not streamed(s)]
    assert tuple(rows_per_warp(s) for s in sketches) == wanted
    sampler = SketchSampler(sketches[1:], ONE_SM)
    states = sampler.sample(4, 0)
    assert len(states) == 4, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        (kernel,) = program.kernels
        per_warp = rows_per_warp(state)
        assert kernel.block[0] == 32 and kernel.grid[0] * kernel.block[1] * per_warp == shape[0]
        source = codegen_program(program)
        assert f"rows_part[{per_warp}]" in source and "__syncthreads" not in source, source
        assert ("float4 vec" in source) == (shape[1] % 128 == 0), source
        interpret_and_compare(dag, program, rtol=1e-4)
    assert replay(dag, states[0].steps) == states[0]


def test_a_matrix_vector_product_may_be_computed_a_warp_per_row_inside_its_cast():
    """y = cast(W x) with its rows on a block's warps: the product computed at the cast's row
    loop, each lane reading 8 halves of W and of x at once, each row a warp reduction."""
    w, x = (
        te.placeholder((8, 512), name="W", dtype="float16"),
        te.placeholder((512,), name="x", dtype="float16"),
    )
    k = te.reduce_axis((0, 512), name="k")
    acc = te.compute(
        (8,),
        lambda n: te.sum(te.cast(w[n, k], "float32") * te.cast(x[k], "float32"), axis=k),
        name="acc",
    )
    dag = ComputeDAG([w, x, te.compute((8,), lambda n: te.cast(acc[n], "float16"), name="y")])
    (warps,) = [s for s in generate_sketches(dag, ONE_SM) if on_warps(s)]
    assert warps["acc"].attach is not None
    sampler = SketchSampler([warps], ONE_SM)
    states = sampler.sample(3, 0)
    assert len(states) == 3, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        (kernel,) = program.kernels
        assert kernel.block[0] == 32 and kernel.grid[0] * kernel.block[1] == 8
        source = codegen_program(program)
        assert source.count("uint4 vec") == 2 and "__syncthreads" not in source, source
        interpret_and_compare(dag, program, rtol=1e-3)


def test_column_sums_single_sums_and_normalisations_get_no_warp_per_row():
    """A column sum reads across memory rows; a whole matrix's sum has one output (and its
    partial sums one block per part); a normalisation's row sums are read by a consumer with
    more elements than rows: none gets the warp-per-row sketch. Nor do row sums too few to
    give every SM 8 warps (16 rows on 132 SMs)."""
    for dag in (column_sum(256, 64), sum_of_squares(64, 64), rms_norm(64, 256)):
        assert not any(on_warps(s) for s in generate_sketches(dag, ONE_SM))
    assert not any(map(on_warps, generate_sketches(row_sums((16, 256)))))
    assert any(map(on_warps, generate_sketches(row_sums((1056, 64)))))


def parts_in_output(sketch) -> bool:
    """Does the sketch sum the parts of RMSNorm's cut sum inside the output, at a chunk of a
    row (the output's last axis, j), rather than at a whole row (i) or in a kernel of its own?"""
    attach = sketch["ms"].attach
    return bool(parts(sketch)) and attach is not None and attach[1].startswith("j")


@pytest.mark.parametrize("m, n, sms, p", [(4, 2048, 16, 8), (2, 8192, 64, 64)])
def test_a_normalisation_of_few_long_rows_sums_the_parts_where_it_reads_them(m, n, sms, p):
    """RMSNorm of a few long rows, its sum of squares cut into P parts: a sketch sums the parts
    inside the output's kernel, each warp of a block of a chunk of a row (P/32 parts a lane,
    or lanes left idle where P < 32), which then writes the chunk in 16-byte vectors: two
    kernels. The warps per block are drawn, and so is the output stage's unrolling. None
    does with `cross_block_parts_in_consumer` off."""
    dag = rms_norm(m, n)
    hardware = HardwareParams(num_sms=sms)
    two_per_sm = SketchParams(cross_block_norm_blocks_per_sm=2)
    sketches = generate_sketches(dag, hardware, two_per_sm)
    in_output = [s for s in sketches if parts_in_output(s)]
    assert [parts(s) for s in in_output] == [p] * 2  # partials: a block per part, vectors or not
    for s in sketches:  # the output's unrolling is drawn where its threads sum the parts
        summed_in_rms = sums_parts_inside(s, s.stage_index("rms"))
        assert summed_in_rms if parts_in_output(s) else not (summed_in_rms and not parts(s))
    off = SketchParams(cross_block_parts_in_consumer=False)
    assert not any(map(parts_in_output, generate_sketches(dag, hardware, off)))
    sampler = SketchSampler(in_output[:1], hardware, two_per_sm)
    states = sampler.sample(6, 0)
    assert len(states) == 6, sampler.rejected
    warps = set()
    for state in states:
        program = sampler.programs[state.key()]
        assert [b.name for b in program.temps] == ["ms_rf"]
        partial, normalised = program.kernels
        assert normalised.block[0] == 32 and normalised.block[2] == 1
        warps.add(normalised.block[1])
        assert state["rms"].auto_unroll_max_step > 0
        source = codegen_program(program)
        assert "*reinterpret_cast<float4*>(&rms[" in source and "__shfl_xor_sync" in source
        interpret_and_compare(dag, program, rtol=1e-4)
    assert len(warps) > 1  # one-warp blocks and blocks of several warps


def layer_norm_moments(m: int, n: int) -> ComputeDAG:
    x = te.placeholder((m, n), name="x")
    g, b = te.placeholder((n,), name="gamma"), te.placeholder((n,), name="beta")
    return ComputeDAG([x, g, b, topi.layer_norm(x, g, b, moments=True)])


def test_a_layer_norm_of_few_long_rows_sums_its_moments_parts_where_it_reads_them():
    """A layer norm's moments (the mean of x and of x^2, from one read of x) are cut like
    RMSNorm's sum of squares: P parts of each row's two moments, the rows counted once
    whatever the number of moments, and a sketch adds each row's parts of both inside the
    output's kernel: two kernels, which compute the layer norm on the interpreter."""
    moments = reduction_stage(layer_norm_moments(4, 2048), "T_layer_norm_moments")
    assert [a.name for a in unread_axes(moments)] == ["i1"]
    hardware = HardwareParams(num_sms=16)
    ctx = sketch_context(hardware)
    # 4 rows on 16 SMs: 32 parts at 8 blocks per SM, as for RMSNorm's 4 sums
    assert CrossBlockReduction().parts(ctx, moments, 8) == 32
    assert CrossBlockReduction().parts(ctx, moments, 2) == 8
    dag = layer_norm_moments(4, 2048)
    eight_per_sm = SketchParams(cross_block_norm_blocks_per_sm=8)
    sketches = generate_sketches(dag, hardware, eight_per_sm)
    in_output = [
        s
        for s in sketches
        if parts(s) and (at := s["T_layer_norm_moments"].attach) and at[1].startswith("i1")
    ]
    assert in_output and {parts(s) for s in in_output} == {32}
    sampler = SketchSampler(in_output, hardware, eight_per_sm)
    states = sampler.sample(4, 0)
    assert len(states) == 4, sampler.rejected
    block_per_part = 0
    for state in states:
        program = sampler.programs[state.key()]
        assert [b.name for b in program.temps] == ["T_layer_norm_moments_rf"]
        partial, _ = program.kernels
        if any(isinstance(n, ir.AllReduce) for n in ir.iter_stmts(partial.body)):
            # a block per part of a row, both moments from its one read of the part
            assert partial.grid[0] == 4 * 32
            block_per_part += 1
        interpret_and_compare(dag, program, rtol=1e-4)
    assert block_per_part
