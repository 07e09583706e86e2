"""The Tensor Core sketch (sketch/tensor_core.py) and its init rules (tensor_core_init.py): which
stages it matches, the structure it builds, sampled states that lower, verify, compute the DAG
on the CPU interpreter and compile with nvcc, and mutations that keep the fixed 16s and 32s."""

from __future__ import annotations

import collections
import math
import random

import numpy as np
import pytest

from autosched import te, topi
from autosched.lower import ir
from autosched.lower.interpreter import run_program
from autosched.lower.verify import verify_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import ROOT
from autosched.schedule.steps import SplitStep
from autosched.search.mutations import (
    MutationContext,
    TileSizeMutation,
    as_step,
    fixed_levels,
    is_unroll_pragma,
)
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.tensor_core import match_tensor_core
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from autosched.task.workload_registry import make_workload_key, workload_tensors
from autosched.task.workloads import SUITE, TENSOR_CORE_SUITE
from autosched.te.dtype import from_storage
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.interpreter_check import assert_half_outputs_match, half_inputs
from tests.workloads_for_tests import suite_dag

N_INTERPRETED = 10
# the M, N and K axes the rule picks, by workload
AXES = {
    "matmul_fp16": ("i", "j", "k"),
    "batch_matmul_bf16": ("i", "j", "k"),
    "conv2d_nhwc_fp16": ("nn", "ff", "rc"),
    "conv2d_nchw_fp16": ("nn", "ff", "rc"),
    "conv2d_nhwcnc_fp16": ("nn", "oo", "ii"),
}


def tc_dag(name: str, reduced: bool = True, args=None) -> ComputeDAG:
    workload, full, small = TENSOR_CORE_SUITE[name]
    key = make_workload_key(workload, args or (small if reduced else full))
    return ComputeDAG(workload_tensors(key))


def reduction_stage(state) -> int:
    return next(i for i, s in enumerate(state.stages) if s.op.reduce_axis)


def has_warp_statements(kernel: ir.Kernel) -> bool:
    return any(isinstance(s, ir.WarpStmt) for s in ir.iter_stmts(kernel.body))


def tensorized(state) -> list[str]:
    return [s.name for s in state.stages for it in s.iters if it.annotation == "tensorize"]


# ---- the rule's condition ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TENSOR_CORE_SUITE))
def test_the_rule_matches_half_precision_products(name):
    dag = tc_dag(name)
    init = dag.get_init_state()
    mt = match_tensor_core(init, reduction_stage(init))
    assert mt is not None and (mt.m, mt.n, mt.k) == AXES[name]
    assert match_tensor_core(tc_dag(name, reduced=False).get_init_state(), reduction_stage(init))


@pytest.mark.parametrize(
    "name, args",
    [
        ("matmul_fp16", (24, 48, 32)),  # M not a multiple of 16
        ("matmul_fp16", (32, 48, 40)),  # K not a multiple of 16
        ("batch_matmul_bf16", (2, 32, 17, 32)),  # N not a multiple of 16
    ],
)
def test_the_rule_pads_axes_that_are_not_multiples_of_16(name, args):
    init = tc_dag(name, args=args).get_init_state()
    mt = match_tensor_core(init, reduction_stage(init))
    assert mt is not None and (mt.m, mt.n, mt.k) == AXES[name]


@pytest.mark.parametrize(
    "name, args",
    [
        ("batch_matmul_bf16", (2, 32, 8, 32)),  # N 8
        ("conv2d_nhwc_fp16", (12, 4, 4, 32, 8, 3, 3, 1, 1)),  # batch (M) 12, CI (K) 8
    ],
)
def test_the_rule_needs_axes_of_16_or_more(name, args):
    dag = tc_dag(name, args=args)
    init = dag.get_init_state()
    assert match_tensor_core(init, reduction_stage(init)) is None
    for sketch in generate_sketches(dag):
        assert not tensorized(sketch)
        assert not any(s.scope.startswith("wmma") for s in sketch.stages)


@pytest.mark.parametrize("name", list(SUITE))
def test_the_rule_does_not_fire_on_fp32_workloads(name):
    dag = suite_dag(name)
    init = dag.get_init_state()
    assert all(match_tensor_core(init, i) is None for i in range(len(init.stages)))


# ---- the sketch -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TENSOR_CORE_SUITE))
def test_the_sketch_is_the_seeds_structure(name):
    # a convolution's implicit GEMM sketch (test_implicit_gemm.py) comes after it
    sketch = generate_sketches(tc_dag(name))[0]
    scopes = collections.Counter(s.scope for s in sketch.stages)
    assert scopes["wmma.accumulator"] == 1 and scopes["shared"] == 2
    assert scopes["wmma.matrix_a"] == 1 and scopes["wmma.matrix_b"] == 1
    acc = next(s for s in sketch.stages if s.scope == "wmma.accumulator")
    c = sketch.stages[acc.attach[0]]
    assert len(tensorized(sketch)) == 4  # the two fragment loads, the mma and the store
    assert [it.annotation for it in c.iters].count("threadIdx.y") == 1
    # the cast epilogue is the root (blocks, warps, 32 lanes; C inside its block loop), or with
    # no epilogue (the seed's fp32 output) the copy-out itself
    root = c if c.compute_at == ROOT else sketch.stages[c.attach[0]]
    assert root.compute_at == ROOT and root.name == ("Conv" if c is root else "T_cast")
    anns = [it.annotation for it in root.iters]
    assert {"blockIdx.x", "threadIdx.y"} <= set(anns)
    if c is not root:  # the epilogue's lanes (the copy-out's are bound when it is sampled)
        assert next(it.extent for it in root.iters if it.annotation == "threadIdx.x") == 32
    # operands: shared copies at the accumulator's outer reduction, fragments inside them
    for s in sketch.stages:
        if s.scope in ("shared", "wmma.matrix_a", "wmma.matrix_b"):
            assert sketch.stages[s.attach[0]] is acc
    # pads are inlined into the shared copies
    assert all(s.compute_at == "inlined" for s in sketch.stages if s.name == "PaddedInput")


# ---- sampled states ---------------------------------------------------------------------------


def check_on_interpreter(dag: ComputeDAG, n: int) -> None:
    """n sampled states lower, verify, use whole warps, and compute the DAG on the interpreter."""
    sampler = SketchSampler(generate_sketches(dag))
    states = sampler.sample(n, 1)
    assert len(states) == n, sampler.rejected
    inputs = half_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    for state in states:
        assert state.is_complete and len(tensorized(state)) == 4
        program = sampler.programs[state.key()]
        verify_program(program)
        warp_kernels = [k for k in program.kernels if has_warp_statements(k)]
        assert warp_kernels  # the product's kernel (an implicit GEMM's reshape has its own)
        for k in warp_kernels:
            assert k.block[0] == 32  # warp statements need whole warps on threadIdx.x
        assert_half_outputs_match(dag, program, inputs, expected)


@pytest.mark.parametrize("name", list(TENSOR_CORE_SUITE))
def test_sampled_states_verify_and_compute_the_dag_on_the_interpreter(name):
    check_on_interpreter(tc_dag(name), N_INTERPRETED)


def test_without_epilogue_the_product_is_the_root():
    """fp16 operands, a float32 output: the copy-out stage is the root (blocks on it)."""
    A = te.placeholder((32, 32), name="A", dtype="float16")
    B = te.placeholder((32, 48), name="B", dtype="float16")
    dag = ComputeDAG([A, B, topi.matmul(A, B, out_dtype="float32")])
    (sketch,) = generate_sketches(dag)
    root = sketch.stages[-1]
    assert root.compute_at == ROOT and root.iters[0].annotation == "blockIdx.x"
    check_on_interpreter(dag, 5)


def test_an_inlined_bias_and_relu_epilogue():
    A = te.placeholder((32, 32), name="A", dtype="float16")
    W = te.placeholder((48, 32), name="W", dtype="float16")
    b = te.placeholder((48,), name="bias", dtype="float32")
    out = topi.cast(topi.nn.relu(topi.nn.dense(A, W, out_dtype="float32") + b), "float16")
    check_on_interpreter(ComputeDAG([A, W, b, out]), 5)


def test_draws_fit_the_opt_in_shared_memory_limit():
    """Draws go up to the opt-in limit (over 48 KB the kernel's shared memory is dynamic)."""
    sketches = generate_sketches(tc_dag("matmul_fp16", reduced=False))
    tiny_hw = HardwareParams(max_shared_memory_per_block_optin=1024)
    tiny = SketchSampler(sketches, tiny_hw, verify=False)
    assert tiny.sample(3, 0) == [] and tiny.rejected["tile_sizes:shared_memory"] > 0
    sampler = SketchSampler(sketches)
    for s in sampler.sample(10, 2):
        for k in sampler.programs[s.key()].kernels:
            assert k.shared_bytes <= sampler.hardware.max_shared_memory_per_block_optin
            # 1 to 8 warps; 16 for 4 warpgroups of wgmma (sm_90)
            assert k.threads_per_block in (32, 64, 128, 256, 512)


@needs_nvcc
@pytest.mark.slow
def test_full_size_states_compile_without_spills():
    from concurrent.futures import ThreadPoolExecutor

    from autosched.codegen.cuda import codegen_program
    from autosched.lower.device_passes import device_program
    from measure.builder import compile_resources

    jobs = []
    for name in TENSOR_CORE_SUITE:
        sampler = SketchSampler(generate_sketches(tc_dag(name, reduced=False)))
        for s in sampler.sample(1, 6):
            jobs.append(codegen_program(device_program(sampler.programs[s.key()])))
    mmas = ("mma_sync", "mma.sync", "wgmma.mma_async")  # wmma, mma or wgmma
    assert all(any(m in src for m in mmas) for src in jobs)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(compile_resources, jobs))  # raises if one does not compile
    assert not [r for res in results for r in res.values() if r.spill_bytes]


# ---- padded axes (extents that are not multiples of 16) --------------------------------------


def _count_global_writes(monkeypatch) -> dict[str, np.ndarray]:
    """Make the interpreter count, per global buffer name, the writes of each element."""
    from autosched.lower import interpreter

    counts: dict[str, np.ndarray] = {}
    check = interpreter._KernelRun._check_bounds

    def counting(self, buf, idx, lanes, what):
        check(self, buf, idx, lanes, what)
        if what == "write" and buf.scope == "global":
            np.add.at(counts.setdefault(buf.name, np.zeros(buf.size, int)), idx, 1)

    monkeypatch.setattr(interpreter._KernelRun, "_check_bounds", counting)
    return counts


def _float_matmul(m: int, n: int, k: int) -> ComputeDAG:
    A = te.placeholder((m, k), name="A", dtype="float16")
    B = te.placeholder((k, n), name="B", dtype="float16")
    return ComputeDAG([A, B, topi.matmul(A, B, out_dtype="float32")])


@pytest.mark.parametrize(
    "make",
    [
        lambda: tc_dag("matmul_fp16", args=(40, 56, 24)),  # M, N, K padded; a cast epilogue
        lambda: _float_matmul(33, 17, 50),  # no epilogue: the output goes through shared memory
        lambda: tc_dag("batch_matmul_bf16", args=(2, 21, 32, 24)),  # a 21-long sequence
    ],
    ids=["matmul_fp16", "float_output", "batch_matmul_bf16"],
)
def test_padded_axes_are_tensorized_and_exact(make, monkeypatch):
    """Tiles past the tensor's edge: the sampled states multiply whole 16x16 tiles (K padding
    zero-filled in shared memory), match numpy, and write every output element exactly once
    (a store past N would land on the next row's element, one past M out of bounds)."""
    dag = make()
    sampler = SketchSampler(generate_sketches(dag))
    states = sampler.sample(3, 1)
    assert len(states) == 3, sampler.rejected
    inputs = half_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    counts = _count_global_writes(monkeypatch)
    for state in states:
        program = sampler.programs[state.key()]
        verify_program(program)
        stmts = [s for k in program.kernels for s in ir.iter_stmts(k.body)]
        assert any(isinstance(s, ir.FragmentMma) for s in stmts)
        counts.clear()
        assert_half_outputs_match(dag, program, inputs, expected)
        for op in dag.outputs:
            assert (counts[op.name] == 1).all()


def test_padded_tile_counts_divide_among_warps():
    from autosched.sketch.tensor_core_init import padded_tiles

    assert [padded_tiles(e) for e in (1024, 48, 1000, 1001, 77, 17)] == [64, 3, 64, 64, 6, 2]


@needs_nvcc
def test_a_padded_state_compiles_without_spills():
    from autosched.codegen.cuda import codegen_program
    from autosched.lower.device_passes import device_program
    from measure.builder import compile_resources

    sampler = SketchSampler(generate_sketches(tc_dag("matmul_fp16", args=(1023, 999, 1001))))
    (state,) = sampler.sample(1, 4)  # an mma state at the register limit, its tile aliased
    program = sampler.programs[state.key()]
    assert program.kernels[0].shared_aliases
    src = codegen_program(device_program(program))
    assert "mma_sync" in src or "mma.sync" in src  # wmma or mma
    assert not [r for r in compile_resources(src, "sm_90").values() if r.spill_bytes]


# ---- mutations --------------------------------------------------------------------------------


def test_tile_size_mutation_keeps_the_fixed_lengths():
    sampler = SketchSampler(generate_sketches(tc_dag("matmul_fp16", reduced=False)), verify=False)
    records = sampler.sample(1, 0)[0].key()
    fixed = fixed_levels(records)
    lanes = [k for k in fixed if as_step(records[k]).lengths == (32,)]
    sixteens = [k for k in fixed if k not in lanes]
    assert all(as_step(records[k]).lengths[-1] == 16 and fixed[k] == 1 for k in sixteens)
    assert len(sixteens) >= 7 and len(lanes) == 3  # epilogue + two shared fetches
    p = SketchParams()
    ctx = MutationContext(p.max_innermost_split_factor, 8, p.auto_unroll_configs)
    rng = random.Random(0)
    changed = 0
    for _ in range(200):
        child = TileSizeMutation().apply(ctx, [records], rng)
        assert child is not None
        for k in sixteens:
            assert as_step(child[k]).lengths[-1] == 16
        for k in lanes:
            assert child[k] == records[k]
        for r in child:
            if r[0] == SplitStep.TAG:
                step = as_step(r)
                assert step.extent is None or step.extent % np.prod(step.lengths) == 0
        changed += child != records
    assert changed == 200


def test_tensor_core_stages_unroll_from_their_own_menu():
    """A tensorized stage's unroll depths, drawn and mutated, come from
    tensor_core_unroll_configs (0 only as the no-fit fallback); an fp32 state's mutations keep
    to auto_unroll_configs."""
    from autosched.search.mutations import AutoUnrollMutation, tensorized_stages

    params = SketchParams(tensor_core_unroll_configs=(16, 64), auto_unroll_configs=(512, 1024))
    hardware = HardwareParams()
    sketches = generate_sketches(tc_dag("matmul_fp16", reduced=False), hardware, params)
    sampler = SketchSampler(sketches, hardware, params, False)
    states = [s.key() for s in sampler.sample(8, 1)]
    assert all(tensorized_stages(r) for r in states)
    depths = {as_step(r).parsed()[1] for s in states for r in s if is_unroll_pragma(r)}
    assert depths <= {0, 16, 64} and depths & {16, 64}
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    rng = random.Random(0)
    children = [AutoUnrollMutation().apply(ctx, [s], rng) for s in states for _ in range(4)]
    mutated = {as_step(r).parsed()[1] for c in children if c for r in c if is_unroll_pragma(r)}
    assert mutated and mutated <= {0, 16, 64}
    fp32_sketches = generate_sketches(suite_dag("matmul"), hardware, params)
    fp32 = SketchSampler(fp32_sketches, hardware, params, False)
    (plain,) = [s.key() for s in fp32.sample(1, 1)]
    assert not tensorized_stages(plain)
    children = [AutoUnrollMutation().apply(ctx, [plain], rng) for _ in range(4)]
    assert all(children)
    assert {as_step(r).parsed()[1] for c in children for r in c if is_unroll_pragma(r)} <= {
        0,
        512,
        1024,
    }


def test_features_of_tensor_core_states():
    from autosched.features.extract import extract_features

    for name in TENSOR_CORE_SUITE:
        sampler = SketchSampler(generate_sketches(tc_dag(name, reduced=False)))
        for s in sampler.sample(3, 0):
            assert np.isfinite(extract_features(sampler.programs[s.key()])).all()


def test_a_search_of_a_tensor_core_task_runs():
    """Sampling, mutations, features and the cost model over Tensor Core states: every
    measured state is correct on the interpreter (half-precision tolerance)."""
    import autosched
    from autosched.search.policy import SearchParams, SketchPolicy
    from tests.sim_measurer import SimulatedMeasurer

    class HalfMeasurer(SimulatedMeasurer):
        def check(self, program):
            dag = self.task.compute_dag
            outs = {b.name: b.dtype for b in program.outputs}
            inputs = half_inputs(dag)
            expected = evaluate(dag.tensors, inputs)
            arrays = {**inputs, **{n: np.zeros_like(expected[n]) for n in outs}}
            run_program(program, arrays)
            return all(
                np.allclose(
                    from_storage(arrays[n], dt).astype(np.float32),
                    from_storage(expected[n], dt).astype(np.float32),
                    rtol=1e-2,
                    atol=1e-2,
                )
                for n, dt in outs.items()
            )

    task = autosched.SearchTask("matmul_fp16", (32, 48, 64))
    measurer = HalfMeasurer(task)
    params = SearchParams(
        population=32, generations=2, sample_init_min_population=8, n_jobs=1, seed=1
    )
    model = autosched.XGBModel(nthread=1, seed=0, few_shot_threshold=0)  # evolves in round 2
    policy = SketchPolicy(task, model, params, verbose=0)
    opts = autosched.TuningOptions(
        num_measure_trials=16, num_measures_per_round=8, measurer=measurer, verbose=0
    )
    res = autosched.auto_schedule(task, policy, opts)
    assert measurer.count == 16 and math.isfinite(res.best_cost)
    assert all(math.isfinite(c) for c in policy.measured.values())
    assert policy.mutation_stats["tile_size"][0] > 0
