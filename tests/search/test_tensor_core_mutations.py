"""The Tensor Core mutations (search/tensor_core_mutations.py): a candidate's instruction family
and pipeline depth change, the records are those the init rules write for the new choice, the
child replays to the same records and its program computes the product on the interpreter; the
depth stays within the shared memory; candidates without Tensor Core stages are never offered
these rules, and draw the other rules as before."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from autosched.lower import ir
from autosched.lower.lowering import lower
from autosched.schedule.steps import (
    FragmentDoubleBufferStep,
    PipelineStagesStep,
    Step,
    TensorCoreInstructionStep,
)
from autosched.search.mutations import MUTATIONS, MutationContext, Records, TensorCoreChoices
from autosched.search.policy import SearchParams
from autosched.search.tensor_core_mutations import GroupChoices, PipelineStagesMutation
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.pipeline_stages import shared_bytes
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from measure.hardware import HardwareParams
from tests.interpreter_check import assert_half_outputs_match, half_inputs
from tests.search.test_search import make_policy, small_task
from tests.sketch.test_tensor_core_sketch import tc_dag

TAIL = (TensorCoreInstructionStep.TAG, PipelineStagesStep.TAG, FragmentDoubleBufferStep.TAG)


def _sampled(
    name: str, n: int, hardware: HardwareParams | None = None, seed: int = 0, reduced: bool = True
):
    """(dag, sampler, the records of n fresh states, a MutationContext for them)."""
    dag = tc_dag(name, reduced)
    hardware = hardware or HardwareParams()
    params = SketchParams()
    sampler = SketchSampler(generate_sketches(dag, hardware, params), hardware, params, False)
    records = [s.key() for s in sampler.sample(n, seed)]
    choices = TensorCoreChoices.of(sampler.plans, params, hardware)
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    ctx.tensor_core = choices
    return dag, sampler, records, ctx


def replay(dag, records: Records):
    """The State of a candidate's records."""
    return dag.replay_steps([Step.from_record(r) for r in records])


def _by_rules(dag, records: Records, groups, choices) -> Records:
    """The records the TensorCoreInstruction, PipelineStages and FragmentDoubleBuffer rules
    write for these choices, by the State methods they call, on the replayed records without
    their tail."""
    state = replay(dag, tuple(r for r in records if r[0] not in TAIL))
    for g in groups:
        if choices[g.acc].instruction == "mma":
            state = state.tensor_core_instruction(g.acc, "mma")
    for g in groups:
        if choices[g.acc].depth != 2:
            for c in g.shared:
                state = state.pipeline_stages(c, choices[g.acc].depth)
    for g in groups:
        if choices[g.acc].doubled_fragments:
            state = state.fragment_double_buffer(g.acc)
    return state.key()


def instruction_of(records: Records, g) -> str:
    return GroupChoices.of(records, g).instruction


def depth_of(records: Records, g) -> int:
    return GroupChoices.of(records, g).depth


@pytest.mark.parametrize("name", ["matmul_fp16", "conv2d_nhwc_fp16"])
def test_instruction_mutation_flips_the_family_as_the_init_rule_would(name):
    dag, _, parents, ctx = _sampled(name, 6)
    rule, rng = MUTATIONS["tensor_core_instruction"], random.Random(0)
    flipped = 0
    for parent in parents:
        groups = ctx.tensor_core.groups(parent)
        assert len(groups) == 1
        (g,) = groups
        child = rule.apply(ctx, [parent], rng)
        if instruction_of(parent, g) == "wgmma":  # only the init rule enters or leaves wgmma
            assert child is None
            continue
        flipped += 1
        assert child is not None and child != parent
        assert instruction_of(child, g) != instruction_of(parent, g)
        assert depth_of(child, g) == depth_of(parent, g)
        assert child == _by_rules(dag, parent, groups, {g.acc: GroupChoices.of(child, g)})
        assert not GroupChoices.of(child, g).doubled_fragments
        state = replay(dag, child)
        assert state.key() == child  # record -> replay -> the same records
        assert state.stages[g.acc].tensor_core_instruction == instruction_of(child, g)
        if not GroupChoices.of(parent, g).doubled_fragments:  # two families: flipping back
            assert rule.apply(ctx, [child], rng) == parent
    assert flipped


def test_pipeline_mutation_moves_the_depth_within_the_shared_memory():
    """A limit that fits 2 or 3 slots of some draws and not more: every child's depth fits its
    tiles (the init rule's estimate), and a depth is redrawn only among those."""
    hardware = HardwareParams(max_shared_memory_per_block_optin=64 * 1024)
    dag, _, parents, ctx = _sampled("matmul_fp16", 16, hardware, seed=1, reduced=False)
    rule, rng = MUTATIONS["pipeline_stages"], random.Random(0)
    buffered = [p for p in parents if "DB" in {r[0] for r in p}]
    assert buffered
    seen, menus = set(), set()
    for parent in buffered:
        (g,) = ctx.tensor_core.groups(parent)
        fits = PipelineStagesMutation.fitting(ctx.tensor_core, parent, g)
        menus.add(len(fits))
        for _ in range(4):
            child = rule.apply(ctx, [parent], rng)
            if len(fits) == 1:
                assert child is None
                continue
            depth = depth_of(child, g)
            assert depth != depth_of(parent, g) and depth in fits
            assert instruction_of(child, g) == instruction_of(parent, g)
            state = replay(dag, child)
            assert state.key() == child
            assert shared_bytes(state, g, depth) <= hardware.max_shared_memory_per_block_optin
            assert all(state.stages[c].pipeline_stages == depth for c in g.shared)
            seen.add(depth)
    assert seen and seen <= {2, 3, 4, 5}
    assert {1, 4} < menus  # the limit cuts some menus short, and leaves some whole
    unbuffered = [p for p in parents if p not in buffered]
    assert all(rule.apply(ctx, [p], rng) is None for p in unbuffered)


def test_mutated_children_compute_the_product_on_the_interpreter():
    """Children of both rules, mma and wmma, 2 to 5 slots, lower and match numpy."""
    dag, _, parents, ctx = _sampled("matmul_fp16", 4, seed=3)
    inputs = half_inputs(dag)
    expected = evaluate(dag, inputs)
    rng = random.Random(1)
    kinds = set()
    for parent in parents:
        child = MUTATIONS["tensor_core_instruction"].apply(ctx, [parent], rng)
        child = MUTATIONS["pipeline_stages"].apply(ctx, [child], rng) or child
        state = replay(dag, child)
        program = lower(state, verify=True)
        flavours = {
            b.fragment_flavour
            for k in program.kernels
            for b in k.allocs
            if b.scope in ir.FRAGMENT_SCOPES
        }
        (g,) = ctx.tensor_core.groups(child)
        assert flavours == {instruction_of(child, g)}
        kinds.add(instruction_of(child, g))
        assert_half_outputs_match(dag, program, inputs, expected)
    assert kinds == {"wmma", "mma"}


def test_candidates_without_tensor_cores_draw_the_other_rules_as_before():
    """An fp32 task's generation is the same with the Tensor Core rules weighted as without
    them; a Tensor Core task's generation uses them."""
    plain = (("tile_size", 0.8), ("auto_unroll", 0.1), ("crossover", 0.1))
    base = dict(population=24, generations=1, sample_init_min_population=24, n_jobs=1, seed=1)
    generations = []
    for weights in (plain, SearchParams().mutation_weights):
        policy = make_policy(small_task(), SearchParams(mutation_weights=weights, **base))
        pop = policy.sample_fresh(24)
        scores = np.linspace(0.0, 1.0, len(pop))
        generations.append(policy.next_generation(pop, scores))
        assert policy.mutation_stats.get("tensor_core_instruction", [0, 0]) == [0, 0]
    assert generations[0] == generations[1]


def test_a_tensor_core_task_draws_them():
    import autosched

    params = SearchParams(population=400, generations=1, sample_init_min_population=24, n_jobs=1)
    policy = make_policy(autosched.SearchTask("matmul_fp16", (32, 48, 32)), params)
    pop = policy.sample_fresh(24)
    policy.next_generation(pop, np.linspace(0.0, 1.0, len(pop)))
    made = policy.mutation_stats
    assert made["tensor_core_instruction"][0] > 0, made
    assert made["pipeline_stages"][0] > 0, made


def test_fragment_mutation_toggles_where_the_init_rule_may_draw():
    from autosched.sketch.fragment_double_buffer import eligible

    dag, _, parents, ctx = _sampled("matmul_fp16", 24, seed=4, reduced=False)
    rule, rng = MUTATIONS["fragment_double_buffer"], random.Random(0)
    flips = {True: 0, False: 0}
    for parent in parents:
        (g,) = ctx.tensor_core.groups(parent)
        before = GroupChoices.of(parent, g)
        child = rule.apply(ctx, [parent], rng)
        lengths = [r[4] for r in (parent[k] for k in g.split_ids)]
        buffered = {r[1] for r in parent if r[0] == "DB"}
        allowed = eligible(ctx.tensor_core.hardware, g, lengths, "mma", buffered)
        if child is None:
            assert before.instruction != "mma" or not (allowed or before.doubled_fragments)
            continue
        after = GroupChoices.of(child, g)
        assert after == dataclasses.replace(before, doubled_fragments=not before.doubled_fragments)
        assert allowed or not after.doubled_fragments
        assert child == _by_rules(dag, parent, (g,), {g.acc: after})
        assert replay(dag, child).key() == child
        flips[after.doubled_fragments] += 1
    assert flips[True] and flips[False]


def test_a_wgmma_stage_keeps_its_family_and_its_record_through_the_mutations():
    """wgmma re-tiles the warps when the init rule draws it: the instruction mutation leaves
    such a stage alone, and the pipeline mutation keeps its TC record."""
    dag = tc_dag("matmul_fp16", False)
    hardware = HardwareParams()
    params = SketchParams(tensor_core_instructions=("wmma", "mma", "wgmma"))
    sampler = SketchSampler(generate_sketches(dag, hardware, params), hardware, params, False)
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, params, hardware)
    parents = [s.key() for s in sampler.sample(24, 0)]
    wgmma = [p for p in parents if instruction_of(p, ctx.tensor_core.groups(p)[0]) == "wgmma"]
    assert wgmma, "no state drew wgmma"
    rng = random.Random(0)
    for parent in wgmma:
        assert MUTATIONS["tensor_core_instruction"].apply(ctx, [parent], rng) is None
        child = MUTATIONS["pipeline_stages"].apply(ctx, [parent], rng)
        if child is not None:
            (g,) = ctx.tensor_core.groups(child)
            assert instruction_of(child, g) == "wgmma"
            assert replay(dag, child).key() == child
