"""The validity check's code-size count (unrolled statements, global stores counted double) and
the init rules' register estimates (every virtual thread's accumulators and operand tiles; the
seeds' schedules fit them)."""

from __future__ import annotations

import pytest

from autosched.lower.lowering import lower
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.validity import check_program
from tests.workloads_for_tests import conv2d_bias_relu_dag, seed_conv_state, suite_dag


def test_code_size_counts_unrolled_copies_and_rejects_huge_kernels():
    from autosched.lower import ir
    from autosched.sketch.utils import SketchParams
    from autosched.sketch.validity import unrolled_statements
    from autosched.te.expr import Var

    dag = suite_dag("matmul", True)
    state = SketchSampler(generate_sketches(dag)).sample(1, 0)[0]
    program = lower(state)
    body = program.kernels[0].body
    n = unrolled_statements(body)
    assert n >= 1
    assert unrolled_statements(ir.For(Var("u"), 4, "unroll", ir.seq([body, body]))) == 8 * n
    assert unrolled_statements(ir.For(Var("s"), 4, "serial", body)) == n
    limits = SketchSampler(generate_sketches(dag)).hardware
    assert check_program(program, limits, SketchParams(max_unrolled_statements=n)) is None
    assert (
        check_program(program, limits, SketchParams(max_unrolled_statements=n - 1)) == "code_size"
    )


def test_unrolled_stores_to_global_memory_count_double():
    """An unrolled reduction accumulating in global memory (softmax's sums) compiles far slower
    than one in registers: its stores count `GLOBAL_STORE_STATEMENTS` each."""
    from autosched.lower import ir
    from autosched.sketch.utils import SketchParams
    from autosched.sketch.validity import GLOBAL_STORE_STATEMENTS, unrolled_statements
    from autosched.te.expr import Const, Load, Var

    k = Var("k")
    for scope, each in (("global", GLOBAL_STORE_STATEMENTS), ("local", 1)):
        acc = ir.Buffer("acc", (1,), "float32", scope)
        update = ir.Store(acc, Const(0, "int32"), Load(acc, (Const(0, "int32"),)))
        assert unrolled_statements(ir.For(k, 1024, "unroll", update)) == 1024 * each
    assert GLOBAL_STORE_STATEMENTS * 1024 > SketchParams().max_unrolled_statements


@pytest.mark.parametrize("tiles", ["SEED_001_TILES", "SEED_002_TILES"])
def test_the_seeds_tiles_and_unroll_fit_the_register_estimates(tiles):
    """The suite's best-known conv2d schedules stay samplable with register estimates that
    count every virtual thread: their tile sizes pass FillTileSize's checks and their unroll
    depth (512) is among AutoUnroll's options."""
    import tests.workloads_for_tests as W
    from autosched.sketch.init_rules import AutoUnroll, FillTileSize

    dag = conv2d_bias_relu_dag()
    seed = seed_conv_state(dag, getattr(W, tiles))
    sampler = SketchSampler(generate_sketches(dag))
    (g,) = sampler.plans[0].groups
    sp = [seed.steps[k].lengths for k in g.spatial_ids]
    rd = [seed.steps[k].lengths for k in g.reduce_ids]
    assert FillTileSize().check_group(sampler.ctx, g, sp, rd) is None
    assert AutoUnroll.unrolled_registers(g, seed)(512) <= AutoUnroll.budget(sampler.ctx, g, seed)


def test_register_estimates_count_every_virtual_thread():
    """Accumulators and the operand tiles of unrolled nests are those of all virtual threads:
    the repeats of a tile overlap where the virtual threads' gap is shorter than the tile."""
    from autosched.sketch.init_rules import accumulators
    from autosched.sketch.plan import Footprint

    assert accumulators([(2, 8, 3, 1), (4, 16, 1, 2)]) == 2 * 3 * 4 * 2
    # a 1-d read x[i + r]: tile 4 of i and 3 of r span 6 elements
    fp = Footprint(0, (1000,), 4, [[[(1, 0), (1, 1)]]])
    assert fp.bytes([4, 3]) == 6 * 4
    assert fp.bytes([4, 3], [(3, 100), (1, 0)]) == 3 * 6 * 4  # 3 disjoint repeats
    assert fp.bytes([1, 3], [(7, 1), (1, 0)]) == 9 * 4  # 7 repeats, 1 apart: 3 + 6
