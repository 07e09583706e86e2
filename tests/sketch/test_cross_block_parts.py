"""How the search draws a cross-block reduction's parts. Interleaved parts
(`CrossBlockReduction.interleaved`): the reduction cut [rounds, P, chunk] and the P part
factored out, so that each block reads one chunk of every round (a grid-stride loop); sampled
states of a whole sum, a 2-norm and a few long rows compute their DAG on the interpreter, in
16-byte vectors where drawn, and at the benchmark's full sizes compile for sm_90 without spills
and with 16-byte loads. Long reductions of a handful of outputs get their cut sketches alone
(`CrossBlockReduction.cut_only`), and many parts of a few outputs are summed across threads
(`CrossThreadReduction.many_parts`)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.lower.device_passes import device_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import REDUCE
from autosched.schedule.steps import print_python_schedule, replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.params import SketchParams
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.interpreter_check import interpret_and_compare
from tests.sketch.test_cross_block import column_sum, rms_norm, row_sums
from tests.sketch.test_single_pass import full_sum, single_pass

# chunks of 16 floats, so that small reductions take several rounds of P chunks
SMALL_CHUNKS = SketchParams(cross_block_interleave_bytes=64)
FOUR_SMS = HardwareParams(num_sms=4)
H100 = HardwareParams(num_sms=132)


def norm2(m: int, n: int) -> ComputeDAG:
    a = te.placeholder((m, n), name="A")
    return ComputeDAG([a, topi.norm2d(a)])


def rounds_and_chunk(sketch) -> tuple[int, int] | None:
    """(rounds, chunk) of an interleaved sketch's partial sums (their two reduction axes, the
    outer one named as the outer part of a three-level split), else None."""
    rf = [st for st in sketch.stages if st.origin == "rfactor"]
    if not rf:
        return None
    axes = rf[0].op.reduce_axis
    if len(axes) != 2 or not axes[0].name.endswith("_o_o"):
        return None
    return axes[0].extent, axes[1].extent


def partial_sums(sketch):
    return next(st for st in sketch.stages if st.origin == "rfactor")


def interleaved(sketches) -> list:
    return [s for s in sketches if rounds_and_chunk(s)]


@pytest.mark.parametrize(
    "dag, expected",
    [
        (full_sum(16384, 4096), (32, 4096)),  # 512 parts of 4096 floats (16 KB), 32 rounds
        (norm2(4096, 4096), (8, 4096)),
        (row_sums((8, 1 << 21)), (8, 4096)),  # 64 parts per row
    ],
)
def test_benchmark_reductions_get_an_interleaved_sketch(dag, expected):
    found = interleaved(generate_sketches(dag, H100))
    assert found and {rounds_and_chunk(s) for s in found} == {expected}


@pytest.mark.parametrize(
    "dag, p",
    [(full_sum(8, 64), 8), (norm2(8, 64), 8), (row_sums((2, 256)), 4)],
)
def test_interleaved_parts_compute_the_reduction(dag, p):
    """Each state's partial sums run one block per part (or a thread per part), reading
    chunks P apart; states in one kernel (the last block sums the parts) and in two, some in
    float4 vectors, all equal to numpy's on the interpreter."""
    sketches = interleaved(generate_sketches(dag, FOUR_SMS, SMALL_CHUNKS))
    assert sketches
    sampler = SketchSampler(sketches, FOUR_SMS, SMALL_CHUNKS)
    states = sampler.sample(10, 0)
    assert len(states) == 10, sampler.rejected
    sources = []
    for state in states:
        program = sampler.programs[state.key()]
        partials = program.kernels[0]
        assert partials.grid[0] * partials.block[0] % p == 0
        interpret_and_compare(dag, program, rtol=1e-4)
        sources.append(codegen_program(program))
    assert any("float4 vec" in s for s in sources)
    assert any(map(single_pass, states)) and not all(map(single_pass, states))
    assert replay(dag, states[0].steps) == states[0]
    assert "rfactor(" in print_python_schedule(states[0])


def test_no_interleaved_parts_where_they_do_not_fit():
    """None when switched off, for a reduction whose P chunks do not divide it at least twice
    (a remainder would guard every load), a column sum (not along memory) or a normalisation's
    statistics (their consumer sums contiguous parts)."""
    off = SketchParams(cross_block_interleave_bytes=0)
    assert not interleaved(generate_sketches(full_sum(8, 64), FOUR_SMS, off))
    assert not interleaved(generate_sketches(full_sum(8, 60), FOUR_SMS, SMALL_CHUNKS))
    assert not interleaved(generate_sketches(column_sum(256, 64), FOUR_SMS, SMALL_CHUNKS))
    assert not interleaved(generate_sketches(rms_norm(4, 2048), FOUR_SMS, SMALL_CHUNKS))


def ptx_of(source: str) -> str:
    from measure import find_nvcc

    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx = Path(tmp, "k.cu"), Path(tmp, "k.ptx")
        cu.write_text(source)
        subprocess.run(
            [find_nvcc(), "-arch=sm_90", "-ptx", "-o", str(ptx), str(cu)],
            check=True,
            capture_output=True,
        )
        return ptx.read_text()


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize(
    "dag",
    [full_sum(16384, 4096), norm2(4096, 4096), row_sums((8, 1 << 21))],
    ids=["sum_16384x4096", "norm2_4096x4096", "row_sum_8x2M"],
)
def test_full_size_interleaved_partial_sums_compile_to_vector_loads(dag):
    """The benchmark's sizes on 132 SMs: sampled states of the interleaved sketches whose
    partial sums read vectors compile without spills and load 16 bytes at once
    (ld.global.nc.v4.f32: LDG.E.128)."""
    from tests.lower.test_lowering import assert_no_spills

    sketches = [
        s
        for s in interleaved(generate_sketches(dag, H100))
        if any(it.annotation == "vectorize" for it in partial_sums(s).iters)
    ]
    sampler = SketchSampler(sketches, H100)
    states = sampler.sample(3, 0)
    assert states, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        assert_no_spills(program)
        source = codegen_program(device_program(program))
        assert "float4 vec" in source
        assert "ld.global.nc.v4.f32" in ptx_of(source)


def uncut(sketches) -> list:
    return [s for s in sketches if not any(st.origin == "rfactor" for st in s.stages)]


@pytest.mark.parametrize(
    "dag, kept",
    [
        (full_sum(16384, 4096), False),  # one output reading 256 MB
        (norm2(4096, 4096), False),
        (row_sums((8, 1 << 21)), False),  # 8 outputs of 8 MB
        (full_sum(64, 1024), True),  # 256 KB: a block may read it alone
        (row_sums((32, 1 << 16)), True),  # 32 outputs: more than an eighth of 132 SMs
        (rms_norm(16, 1 << 18), True),  # a normalisation: its rows over clusters are uncut
    ],
)
def test_long_reductions_of_a_handful_of_outputs_get_only_cut_sketches(dag, kept):
    """A block per output would stream a whole long reduction through a few SMs: where the
    outputs are at most an eighth of the SMs and each reads 1 MB or more, the cut sketches
    alone are made (`CrossBlockReduction.cut_only`); `cross_block_cut_only_bytes=0` keeps
    the uncut ones."""
    sketches = generate_sketches(dag, H100)
    assert any(st.origin == "rfactor" for s in sketches for st in s.stages)
    assert bool(uncut(sketches)) == kept
    always = SketchParams(cross_block_cut_only_bytes=0)
    assert uncut(generate_sketches(dag, H100, always))


def final(sketch):
    """The stage that sums a cut reduction's parts (rfactor puts the parts just before it)."""
    stages = list(sketch.stages)
    return stages[stages.index(partial_sums(sketch)) + 1]


@pytest.mark.parametrize(
    "dag, loop",
    [
        (full_sum(16384, 4096), False),  # 512 parts into one output
        (norm2(4096, 4096), False),
        (row_sums((8, 1 << 21)), True),  # 64 parts per row: a thread may sum them
    ],
)
def test_many_parts_of_few_outputs_are_summed_across_threads(dag, loop):
    """The parts' sum of a whole sum or norm (512 parts, one output) is a cross-thread
    reduction in every sketch (`CrossThreadReduction.many_parts`): a thread per output would
    load 512 parts some 70 at a time and add them in one chain. 64 parts per row may still be
    a thread's loop."""
    summed_by_loop = [
        s
        for s in generate_sketches(dag, H100)
        if not any(it.annotation == "threadIdx.x" and it.kind == REDUCE for it in final(s).iters)
    ]
    assert bool(summed_by_loop) == loop
