"""The "wgmma" Tensor Core instruction family end to end: the `TensorCoreInstruction` rule draws
it (only where listed, on sm_90, for warpgroup-shaped tiles), the schedule records and prints
it, lowering stores the shared operands in the canonical layout (`lower/wgmma_operands.py`) and
the `warpgroup_mma` pass turns the warps' 16x16 products into wgmmas
(`lower/warpgroup_mma.py`); sampled states of float16 / bfloat16 matmul and batch_matmul (and
of padded M, N or K: a conv of 7x7 pixels) run on the CPU interpreter against numpy, compile for
sm_90a without spills, and run on the GPU.
"""

from __future__ import annotations

import dataclasses
import json
from unittest import mock

import pytest

from autosched import te, topi
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower.lowering import lower
from autosched.lower.wgmma_operands import canonical_index
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.tensor_core_instruction import rounded_to_warpgroups, warpgroup_divisible
from autosched.sketch.tensor_core_plan import tensor_core_groups
from autosched.sketch.utils import SketchParams
from autosched.te.expr import Var
from autosched.te.npeval import eval_expr
from measure import HardwareParams, compile_resources
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz
from tests.sketch.test_implicit_gemm import conv_nhwc

WGMMA_ONLY = SketchParams(tensor_core_instructions=("wgmma",))
ACC = "T_matmul.wmma.accumulator"


def batch_matmul_dag(dtype: str = "bfloat16") -> ComputeDAG:
    """B is (batch, N, K): its shared tiles are K-major, A's too."""
    a = te.placeholder((2, 128, 32), dtype, "A")
    b = te.placeholder((2, 64, 32), dtype, "B")
    return ComputeDAG([a, b, topi.batch_matmul(a, b, out_dtype="float32")])


def sample(dag, params=WGMMA_ONLY, n=8, seed=1, hardware=None):
    sampler = SketchSampler(generate_sketches(dag), hardware=hardware, params=params)
    states = sampler.sample(n, seed)
    drawn = [
        s for s in states if '.tensor_core_instruction("wgmma")' in dag.print_python_schedule(s)
    ]
    return sampler, states, drawn


def wgmma_matmul_state():
    """A 64 x 64 x 64 float16 matmul by test_tensorize's recipe with 4 warps along M (one
    warpgroup), one 16-row tile and two 16-column tiles a warp, drawn as wgmma: the golden
    workload of the `warpgroup_mma` pass."""
    with mock.patch.multiple(tz, WARPS=(4, 1), REPS=(1, 2)):
        dag, state = tz.matmul_state()
    return state.tensor_core_instruction(ACC, "wgmma")


def is_wgmma(program: ir.Program) -> bool:
    return any(isinstance(s, wi.WgmmaMma) for k in program.kernels for s in ir.iter_stmts(k.body))


@pytest.mark.parametrize(
    "make",
    [lambda: tz.matmul_dag(n=128), lambda: tz.matmul_dag("bfloat16", n=128), batch_matmul_dag],
)
def test_sampled_wgmma_states_compute_the_dag_on_the_interpreter(make):
    dag = make()
    sampler, states, drawn = sample(dag, n=4)
    assert drawn, sampler.rejected
    for s in drawn[:2]:
        program = sampler.programs[s.key()]
        assert is_wgmma(program)
        kernel = program.kernels[0]
        assert kernel.block[1] % 4 == 0  # whole warpgroups
        assert not any(b.scope in ir.OPERAND_SCOPES for b in kernel.allocs)  # no fragments
        tz.run_and_compare(dag, program)


def test_a_sampled_wgmma_convolution_computes_the_dag():
    """A conv2d's shared operands keep unit window dimensions between their tile dimensions
    (`wgmma_operands.tile_dims`)."""
    dag = tz.conv_dag()
    sampler, _, drawn = sample(dag, n=4, seed=0)
    assert drawn, sampler.rejected
    tz.run_and_compare(dag, sampler.programs[drawn[0].key()])


def padded_matmul_dag(m: int, n: int, k: int) -> ComputeDAG:
    a = te.placeholder((m, k), "float16", "A")
    b = te.placeholder((k, n), "float16", "B")
    return ComputeDAG([a, b, topi.matmul(a, b, out_dtype="float32")])


@pytest.mark.parametrize(
    "make",
    [
        lambda: padded_matmul_dag(50, 64, 64),  # M padded: a 64-row tile holding 50 rows
        lambda: padded_matmul_dag(64, 64, 40),  # K padded: zero-filled past 40
        lambda: conv_nhwc(1, 7, 16, 32, 1, 1, 0),  # a batch-1 conv of 7x7 pixels: M = 49
        # M = 784 = 49 tiles, which no block tile of whole warpgroups divides: rounded up
        lambda: conv_nhwc(1, 28, 16, 32, 1, 1, 0),
    ],
)
def test_wgmma_runs_whole_tiles_past_padded_edges(make):
    """A warpgroup's warps issue each wgmma together: where M, N or K is padded, or a block
    tile rounded up to whole warpgroups runs past M, its wgmmas run whole, untested, on
    zero-filled shared tiles (states the other families guard)."""
    dag = make()
    sketches = [s for s in generate_sketches(dag) if tensor_core_groups(s)]
    sampler = SketchSampler(sketches, params=WGMMA_ONLY)
    states = sampler.sample(4, 1)
    drawn = [s for s in states if is_wgmma(sampler.programs[s.key()])]
    assert drawn, sampler.rejected
    tz.run_and_compare(dag, sampler.programs[drawn[0].key()])


def test_block_tiles_are_rounded_up_to_warpgroups_only_where_none_divides_m():
    assert not warpgroup_divisible(49) and not warpgroup_divisible(98)
    assert warpgroup_divisible(196) and warpgroup_divisible(4) and not warpgroup_divisible(2)
    # 49 tiles: blocks of 4 or 8 cover 52 or 56; 2 tiles: a block of 4 would double M
    assert [rounded_to_warpgroups(w, 49) for w in (1, 7)] == [4, 8]
    assert rounded_to_warpgroups(2, 2) == 2 and rounded_to_warpgroups(6, 14) == 8


def test_the_rule_draws_wgmma_only_where_listed_and_on_hopper():
    dag = tz.matmul_dag(n=128)
    assert "wgmma" in SketchParams().tensor_core_instructions  # on by default
    _, states, drawn = sample(dag, SketchParams(), n=12, seed=1)
    assert drawn and len(drawn) < len(states)  # only block tiles warpgroups can compute get it
    unlisted = SketchParams(tensor_core_instructions=("wmma", "mma"))
    _, states, drawn = sample(dag, unlisted, n=8)
    assert states and not drawn
    sm80 = dataclasses.replace(HardwareParams(), arch="sm_80")
    _, states, drawn = sample(dag, WGMMA_ONLY, n=8, hardware=sm80)
    assert states and not drawn
    _, states, drawn = sample(dag, SketchParams(), n=8, hardware=sm80)
    assert states and not drawn


def test_the_recipe_state_computes_the_matmul():
    state = wgmma_matmul_state()
    program = lower(state)
    assert is_wgmma(program)
    tz.run_and_compare(state.dag, program)


def test_the_features_count_the_wgmmas_multiply_adds():
    from autosched.features import extract_features
    from autosched.features.table import FEATURE_NAMES

    features = extract_features(lower(wgmma_matmul_state()))
    assert (features[:, FEATURE_NAMES.index("float_mad")] > 0).sum() == 2  # the two wgmmas


def test_the_step_records_prints_and_replays():
    dag = tz.matmul_dag(n=128)
    sampler, _, drawn = sample(dag)
    state = drawn[0]
    text = dag.print_python_schedule(state)
    assert 's[T_matmul_wmma_accumulator].tensor_core_instruction("wgmma")' in text
    records = [json.loads(json.dumps(step.to_record())) for step in state.steps]
    assert [r[2] for r in records if r[0] == "TC"] == ["wgmma"]
    replayed = replay(dag, records)
    assert replayed.key() == state.key()
    assert is_wgmma(lower(replayed))


def test_lowering_stores_operands_canonically_and_orders_the_async_work():
    """The plain order (no cp.async pipeline of 3 or more slots: test_wgmma_mainloop has it)."""
    dag = tz.matmul_dag(n=128)
    sampler, _, drawn = sample(dag, dataclasses.replace(WGMMA_ONLY, pipeline_stages=(2,)))
    kernel = sampler.programs[drawn[0].key()].kernels[0]
    stmts = list(ir.iter_stmts(kernel.body))
    kinds = [type(s).__name__ for s in stmts]
    for i, s in enumerate(stmts):  # every barrier: wgmmas done, stores fenced for them
        if isinstance(s, ir.Barrier):
            assert kinds[i - 2 : i] == ["WgmmaWait", "ProxyFence"]
    first = kinds.index("WgmmaMma")
    commit = kinds.index("WgmmaCommit")
    assert "WgmmaFence" in kinds[:first] and commit > first
    # the K loop's wgmmas are waited for after it, before the accumulators are stored
    assert "WgmmaWait" in kinds[commit : kinds.index("FragmentStore")]
    r, c = Var("r"), Var("c")
    # element (r, c) of a 16 x 32 tile: 8-element column groups of 16 rows each, 8 x 16 apart;
    # 8 x 16 + 8 apart where the rows are padded (32 of 40 storage columns used)
    for shape, stride in (((16, 32), 128), ((16, 40), 136)):
        flat = canonical_index([r, c], shape, 32, "tile")
        for (rv, cv), want in {(3, 9): stride + 3 * 8 + 1, (10, 31): 3 * stride + 87}.items():
            assert eval_expr(flat, {id(r): rv, id(c): cv}, None, None) == want


def test_a_state_whose_tiles_are_not_warpgroup_shaped_does_not_lower():
    dag = tz.matmul_dag(n=128)
    sampler, states, _ = sample(dag, SketchParams(tensor_core_instructions=("mma",)), n=12)
    shapes = [s for s in states if sampler.programs[s.key()].kernels[0].block[1] % 4]
    assert shapes
    with pytest.raises(LoweringError, match="wgmma"):
        lower(shapes[0].tensor_core_instruction(ACC, "wgmma"))


@needs_nvcc
def test_sampled_wgmma_state_compiles_for_sm_90a_without_spills():
    from autosched import build

    dag = tz.matmul_dag(n=256)
    _, _, drawn = sample(dag, n=8, seed=3)
    source = build(dag, drawn[0]).source
    assert "wgmma.mma_async.sync.aligned.m64n" in source
    (res,) = compile_resources(source, arch="sm_90").values()
    assert res.spill_bytes == 0


@pytest.mark.gpu
@pytest.mark.parametrize("make", [lambda: tz.matmul_dag(n=256), batch_matmul_dag])
def test_gpu_wgmma_states_match_numpy(make):
    from tests.gpu.test_gpu_kernels import run_on_gpu

    dag = make()
    _, _, drawn = sample(dag, n=8, seed=3)
    assert drawn
    for s in drawn[:3]:
        run_on_gpu(dag, s, rtol=1e-2, atol=1e-2)
