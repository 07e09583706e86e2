"""Sketch generation and random annotation (autosched.sketch): golden sketches of the suite, the
seed's structure, GPU limits, correctness of sampled states on the CPU interpreter at reduced
sizes, nvcc resource checks, and the sampling speed."""

from __future__ import annotations

import collections
import math
import random
import shutil
import time

import numpy as np
import pytest

from autosched.lower.lowering import lower
from autosched.schedule.stage import ATTACHED, INLINED, ROOT
from autosched.schedule.steps import PragmaStep, SplitStep, print_python_schedule
from autosched.sketch import SketchSampler, generate_sketches, sample_initial_population
from autosched.sketch import rules as R
from autosched.sketch.utils import (
    SketchParams,
    divisors,
    factorization_schemes,
    has_cross_thread_reduction,
)
from autosched.sketch.validity import check_program
from autosched.task.workloads import SUITE
from measure.hardware import HardwareParams
from tests.workloads_for_tests import conv2d_bias_relu_dag, seed_conv_state, suite_dag

N_INTERPRETED = 20  # states per workload run on the interpreter (120 of the cross-thread ones)
N_FULL_SIZE = 10  # full-size states per workload lowered in CI (200 in the slow test)


def ir_text_of(program) -> str:
    from autosched.lower.ir_text import program_text

    return program_text(program)


def sketches_text(sketches) -> str:
    return "".join(f"# sketch {k}\n{print_python_schedule(s)}" for k, s in enumerate(sketches))


# ---- helpers ----------------------------------------------------------------------------------


def test_factorization_schemes_are_all_perfect_tilings():
    for extent, n, most in [(12, 2, 64), (512, 4, 64), (7, 4, 64), (1, 3, 64), (64, 2, 4)]:
        schemes = factorization_schemes(extent, n, most)
        brute = {(a, b) for a in divisors(extent) for b in divisors(extent)} if n == 2 else None
        for s in schemes:
            assert len(s) == n and extent % np.prod(s) == 0 and s[-1] <= most
        assert len(set(schemes)) == len(schemes)
        if brute is not None:
            assert set(schemes) == {
                s for s in brute if extent % (s[0] * s[1]) == 0 and s[1] <= most
            }
    assert factorization_schemes(512, 4, 64) is factorization_schemes(512, 4, 64)  # cached
    assert len(factorization_schemes(2**9, 4, 2**9)) == 715  # C(9 + 4, 4)


def test_gpu_rule_order():
    assert [type(r) for r in R.GPU_RULES] == [
        R.AddCacheRead,
        R.KeepFetchedNormalization,
        R.AlwaysInline,
        R.SplitKReduction,
        R.CrossBlockReduction,
        R.CrossThreadReduction,
        R.MultiLevelTilingTensorCore,
        R.AddCacheWrite,
        R.MultiLevelTilingWithFusion,
        R.MultiLevelTiling,
        R.RowOverCluster,
        R.RowInSharedMemory,
        R.SkipStage,
    ]


# ---- sketches ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SUITE))
def test_suite_sketches_golden(name, golden):
    """The suite's sketches as tests/golden/sketch_<name>.txt holds them (after a rule change:
    pytest --update-golden, then review the diff)."""
    golden(f"sketch_{name}.txt", sketches_text(generate_sketches(suite_dag(name))))


@pytest.mark.parametrize("name", list(SUITE))
def test_sketches_do_not_depend_on_sizes(name):
    """The rules see structure, not sizes: the reduced DAG has the same sketches (same steps
    up to the recorded extents). Split-K is the one rule that asks how many outputs and how
    long a reduction there are (tests/sketch/test_split_k.py): it is left out here."""

    def shape(sketches):
        return [
            [
                (r[0],) + tuple(x for i, x in enumerate(r[1:]) if not (r[0] == "SP" and i == 2))
                for r in s.key()
            ]
            for s in sketches
        ]

    unsplit = SketchParams(
        split_k_max_outputs=0, cross_block_blocks_per_sm=0, cross_block_threads_per_sm=0
    )
    full = generate_sketches(suite_dag(name), params=unsplit)
    reduced = generate_sketches(suite_dag(name, True), params=unsplit)
    assert shape(full) == shape(reduced)


def test_sketch_counts():
    counts = {name: len(generate_sketches(suite_dag(name))) for name in SUITE}
    # dense with batch 1: four cross-thread sketches (threads sharing the block's outputs, or
    # one output per block, reading vectors or not) and the tiled one (its 128 outputs are
    # enough not to be cut in parts: test_cross_block.py); softmax: each of its two reductions
    # cross-thread or not (Ansor's rule lets the other rules run too), in vectors (the output
    # too, where both reductions are fused in it) or not; conv2d_bias_relu (25,088 outputs of
    # 4,608-long sums): unsplit, and its reduction split in 4 and in 16 (split-K). Softmax's
    # two sketches of one block per row (both reductions in the output) also keep the row in
    # shared memory, and the one that reads vectors keeps it in registers too, read plainly or
    # by streaming loads (row_in_shared.py): eleven
    extra = {"dense_bias": 5, "softmax": 11, "conv2d_bias_relu": 3}
    assert counts == {name: extra.get(name, 1) for name in SUITE}


def test_conv2d_bias_relu_sketch_is_the_seeds_structure():
    """The sketch plus the init rules give exactly the seed's step list (seeds/001, "Equivalent
    python schedule") once the random decisions are the seed's."""
    dag = conv2d_bias_relu_dag()
    seed = seed_conv_state(dag)
    sketch, *split_k = generate_sketches(dag)  # the unsplit one first
    # split in 4 and in 16, the input channels alone (the window axes tiled as in the unsplit
    # one), the parts summed inside the bias + relu stage
    assert [len(s.steps) for s in split_k] == [26, 26]
    n = len(sketch.steps)
    assert n == 20
    for ours, theirs in zip(sketch.steps, seed.steps[:n], strict=True):
        if isinstance(ours, SplitStep):
            assert None not in theirs.lengths and set(ours.lengths) == {None}
            assert ours.to_record()[:3] == theirs.to_record()[:3]
        else:
            assert ours == theirs
    # The seed has neither double buffering nor padded shared rows: draw neither.
    from autosched.sketch.utils import SketchParams

    plain = SketchParams(double_buffer_probability=0.0, shared_padding_probability=0.0)
    state = SketchSampler([sketch], HardwareParams(), plain).sample(1, 0)[0]
    assert len(state.steps) == len(seed.steps)
    for ours, theirs in zip(state.steps, seed.steps, strict=True):
        assert type(ours) is type(theirs)
        if isinstance(ours, SplitStep):  # tile sizes and vector lengths are random
            assert ours.to_record()[:3] == theirs.to_record()[:3]
        elif isinstance(ours, PragmaStep):  # the unroll depth is random
            assert ours.pragma_type.split("$")[0] == theirs.pragma_type.split("$")[0]
        else:
            assert ours == theirs


def test_the_tvm_form_of_generate_sketches_takes_a_task():
    from autosched import compat
    from autosched.task.search_task import SearchTask

    task = SearchTask(dag=suite_dag("matmul", True))
    assert compat.generate_sketches(task) == generate_sketches(task.compute_dag)


# ---- sampling ---------------------------------------------------------------------------------


def _classify(state) -> list[str]:
    """How each non-placeholder stage ended up: inlined, attached, tiled or parallel."""
    out = []
    for stage in state.stages:
        if stage.is_placeholder:
            continue
        if stage.compute_at == INLINED:
            out.append("inlined")
        elif stage.compute_at == ATTACHED:
            out.append("attached")
        else:
            anns = [it.annotation for it in stage.iters]
            # a root's threads: its own, or those of a reduction computed at one of its loops
            threads = "threadIdx.x" in anns or has_cross_thread_reduction(
                state, state.stages.index(stage)
            )
            assert stage.compute_at == ROOT and threads, (stage.name, anns)
            out.append("tiled" if "vthread" in anns else "parallel")
    return out


@pytest.mark.parametrize("name", list(SUITE))
def test_sampled_states_lower_within_gpu_limits(name):
    """Full sizes: every sampled state lowers and fits the GPU; every stage is inlined,
    attached (tiled or cached) or parallelised over blocks and threads."""
    dag = suite_dag(name)
    sampler = SketchSampler(generate_sketches(dag))
    states = sampler.sample(N_FULL_SIZE, 1)
    assert len(states) == N_FULL_SIZE
    for s in states:
        assert s.is_complete
        _classify(s)
        program = sampler.programs[s.key()]
        assert check_program(program, sampler.hardware, sampler.params) is None
        assert ir_text_of(lower(s)) == ir_text_of(program)  # the sampler's program is the state's


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SUITE))
def test_200_states_lower_full_size(name, request):
    """200 states per workload at full size lower (about 4 minutes: run with -m slow)."""
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("lowering 1600 full-size states takes minutes; run with -m slow")
    sampler = SketchSampler(generate_sketches(suite_dag(name)))
    states = sampler.sample(200, 2)
    assert len(states) == 200
    for s in states:
        lower(s)


@pytest.mark.parametrize("name", list(SUITE))
def test_sampled_states_compute_the_dag_on_the_interpreter(name, interpreted_samples):
    """Reduced sizes, same rules: each sampled state's program, run on the CPU interpreter,
    matches the numpy evaluation of the DAG (shared with test_cross_thread.py's larger samples
    of the same seed: a state is interpreted once per session)."""
    assert len(interpreted_samples.get(name, N_INTERPRETED, 3)) == N_INTERPRETED


def test_sampling_is_deterministic():
    sketches = generate_sketches(suite_dag("conv2d_bias_relu"))
    a = sample_initial_population(sketches, 10, random.Random(5), verify=False)
    b = sample_initial_population(sketches, 10, np.random.default_rng(5), verify=False)
    c = sample_initial_population(sketches, 10, 5, verify=False)
    assert a == c and len(b) == 10 and len({s.fingerprint() for s in a}) == 10


def test_limits_are_enforced_and_reasons_counted():
    """A tiny shared memory makes every tiled state invalid: nothing raises, reasons counted."""
    from measure.hardware import HardwareParams

    sketches = generate_sketches(suite_dag("matmul"))
    stats = collections.Counter()
    hw = HardwareParams(max_shared_memory_per_block=64)
    got = sample_initial_population(sketches, 5, 0, hw, stats=stats)
    assert got == [] and stats["tile_sizes:shared_memory"] > 0
    # and the lowering check agrees with the estimate that filtered them (a double-buffered
    # state holds two copies of its tiles)
    ok = sample_initial_population(sketches, 20, 0)
    for s in ok:
        program = lower(s)
        copies = 2 if any(st.double_buffer for st in s.stages) else 1
        for k in program.kernels:
            assert k.shared_bytes <= copies * 48 * 1024 and k.threads_per_block <= 1024


def test_thread_and_vthread_limits_hold():
    hw_limits = HardwareParams()
    for name in ("conv2d_b16", "matmul", "depthwise"):
        sampler = SketchSampler(generate_sketches(suite_dag(name)), verify=False)
        for s in sampler.sample(100, 4):
            for stage in s.stages:
                for it in stage.iters:
                    if it.annotation == "vthread":
                        assert it.extent <= hw_limits.max_vthread_extent
                    tiled = "vthread" in [x.annotation for x in stage.iters]
                    if it.annotation == "threadIdx.x" and stage.compute_at == ROOT and tiled:
                        assert 32 <= it.extent <= 1024


def test_sampling_speed():
    """The sampler makes >= 500 complete conv2d states per second per core (decisions, replay and
    the cheap checks; lowering for the GPU filter is counted apart)."""
    sketches = generate_sketches(conv2d_bias_relu_dag())
    sampler = SketchSampler(sketches, verify=False)
    sampler.sample(50, 0)  # warm the factorisation caches
    t = time.process_time()
    states = sampler.sample(500, 1)
    rate = len(states) / (time.process_time() - t)
    print(f"\nconv2d+bias+relu: {rate:.0f} complete states/s per core (without lowering)")
    assert rate > 150  # generous: CI machines are slow and shared


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
@pytest.mark.slow
def test_sampled_states_compile_with_nvcc_mostly_without_spills():
    """A full-size state per workload compiles (sm_90), at most 3 of the 8 with spills. Spills
    cannot be ruled out before compiling (ptxas reacts erratically to unrolling: a deeper unroll
    may spill where both a shallower and a deeper one do not): the sampler's register estimates
    keep them rare (about one state in ten), the builder rejects the rest. test_vthread.py
    bounds the rate of the states with virtual threads."""
    from concurrent.futures import ThreadPoolExecutor

    from autosched.codegen.cuda import codegen_program
    from autosched.lower.device_passes import device_program
    from measure.builder import compile_resources

    jobs = []
    for name in SUITE:
        sampler = SketchSampler(generate_sketches(suite_dag(name)))
        for s in sampler.sample(1, 6):
            jobs.append((name, codegen_program(device_program(sampler.programs[s.key()]))))
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda job: compile_resources(job[1]), jobs))  # raises if not
    spilled = [
        name
        for (name, _), res in zip(jobs, results, strict=True)
        if any(r.spill_bytes for r in res.values())
    ]
    print(
        f"\n{len(jobs) - len(spilled)} of {len(jobs)} sampled states compile without spills; "
        f"spilled: {spilled}"
    )
    assert len(spilled) <= 3


def fresh_plans(params, n: int, rng: random.Random, workload: str = "batch_matmul") -> list:
    """(state, its sketch's plan, the sampler's InitContext) of n fresh full-size states."""
    dag = suite_dag(workload)
    hardware = HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hardware, params), hardware, params, False)
    return [
        (state, sampler.plans[sampler.sketch_of[state.key()]], sampler.ctx)
        for state in sampler.sample(n, rng)
    ]


def over_budget_unrolls(params, n: int = 60) -> tuple[int, int]:
    """(tiled stages sampled, those whose unroll depth the register estimate rejects) over n
    fresh states of the full-size batch_matmul, whose tiles often leave little room to unroll.
    Depth 0 is not counted: AutoUnroll falls back to it where no depth fits."""
    from autosched.sketch.init_rules import AutoUnroll

    stages = over = 0
    for state, plan, ctx in fresh_plans(params, n, random.Random(3)):
        for g in plan.groups:
            (depth,) = [
                s.parsed()[1]
                for s in state.steps
                if isinstance(s, PragmaStep) and s.stage_id == g.tiled
            ]
            regs = AutoUnroll.unrolled_registers(g, state)
            stages += 1
            over += depth > 0 and regs(depth) > AutoUnroll.budget(ctx, g, state)
    return stages, over


def test_unroll_depths_stay_within_the_register_estimate():
    """AutoUnroll keeps a tiled stage's unroll depth within the register estimate."""
    from autosched.sketch.utils import SketchParams

    stages, over = over_budget_unrolls(SketchParams())
    assert stages >= 30 and over == 0


def test_sketch_params_refuse_a_probability_outside_0_1():
    from autosched.sketch.utils import SketchParams

    with pytest.raises(ValueError, match="shared_padding_probability must be in"):
        SketchParams(shared_padding_probability=1.5)
    with pytest.raises(ValueError, match="double_buffer_probability must be in"):
        SketchParams(double_buffer_probability=-0.1)
    with pytest.raises(ValueError, match="auto_unroll_configs must be one or more depths"):
        SketchParams(auto_unroll_configs=())
    with pytest.raises(ValueError, match="tensor_core_unroll_configs must be one or more"):
        SketchParams(tensor_core_unroll_configs=(-1,))


def sampled_unroll_depths(params, n: int = 40) -> collections.Counter:
    """The unroll depths of n fresh full-size batch_matmul states' tiled stages."""
    depths: collections.Counter = collections.Counter()
    for state, plan, _ in fresh_plans(params, n, random.Random(5)):
        tiled = {g.tiled for g in plan.groups}
        depths.update(
            s.parsed()[1] for s in state.steps if isinstance(s, PragmaStep) and s.stage_id in tiled
        )
    return depths


def test_fresh_fp32_states_unroll_from_the_cuda_core_menu():
    """A CUDA-core stage draws its depth from auto_unroll_configs (by default the deep ones
    alone; 0 only where no depth fits the register estimate), not from the Tensor Core menu."""
    from autosched.sketch.utils import SketchParams

    default = sampled_unroll_depths(SketchParams())
    assert set(default) <= {0, 64, 512, 1024} and default[512] + default[1024] >= 10
    assert default[0] <= sum(default.values()) // 4  # the fallback, not a draw
    wide = SketchParams(auto_unroll_configs=(16,), tensor_core_unroll_configs=(512,))
    assert set(sampled_unroll_depths(wide)) <= {0, 16}


def launched_threads(params, n: int = 40, workload: str = "batch_matmul") -> list[int]:
    """Threads in all (outputs over a thread's accumulators) of each tiled stage of n fresh
    full-size states of a suite workload (batch_matmul: a small-output stage whose random tiles
    often launch few)."""
    from autosched.sketch.init_rules import accumulators

    out = []
    for state, plan, _ in fresh_plans(params, n, random.Random(5), workload):
        for g in plan.groups:
            spatial = [state.steps[k] for k in g.spatial_ids]
            outputs = math.prod(s.extent for s in spatial)
            out.append(outputs // accumulators([s.lengths for s in spatial]))
    return out


def test_min_threads_per_sm_keeps_fresh_launches_filling_the_gpu():
    """Without the floor (0) random tile sizes give many launches below two warps per SM; with
    min_threads_per_sm (64 by default) every fresh tiled stage launches at least that many per
    SM, and a higher floor raises them further."""
    from autosched.sketch.utils import SketchParams

    floor = 64 * HardwareParams().num_sms
    unfloored = launched_threads(SketchParams(min_threads_per_sm=0))
    assert len(unfloored) >= 30 and sum(t < floor for t in unfloored) >= len(unfloored) // 4
    filled = launched_threads(SketchParams())
    assert len(filled) >= 30 and min(filled) >= floor
    higher = launched_threads(SketchParams(min_threads_per_sm=128))
    assert len(higher) >= 30 and min(higher) >= 2 * floor
    with pytest.raises(ValueError, match="min_threads_per_sm must be >= 0"):
        SketchParams(min_threads_per_sm=-1)


def test_split_ids_read_as_split_steps_and_stages_name_where_they_are_computed():
    """split_at reads a plan's split id as its SplitStep (a ScheduleError for another step);
    attach_target names the stage a stage is computed at, or the stage itself."""
    from autosched.errors import ScheduleError
    from autosched.sketch.stage_steps import split_at, split_extent
    from autosched.sketch.utils import attach_target

    sketch = generate_sketches(suite_dag("matmul"))[0]
    k = next(k for k, s in enumerate(sketch.steps) if isinstance(s, SplitStep))
    assert split_at(sketch.steps, k) is sketch.steps[k]
    assert split_extent(sketch.steps, k) == sketch.steps[k].extent == 1024
    other = next(j for j, s in enumerate(sketch.steps) if not isinstance(s, SplitStep))
    with pytest.raises(ScheduleError, match=f"step {other} is .* not a split"):
        split_at(sketch.steps, other)
    targets = [attach_target(sketch, i) for i in range(len(sketch.stages))]
    for i, stage in enumerate(sketch.stages):
        assert targets[i] == (stage.attach[0] if stage.compute_at == ATTACHED else i)
    assert any(t != i for i, t in enumerate(targets))  # the shared caches are attached
