"""Transform steps: every step kind round-trips through its record, applies as documented, and
every invalid step raises ScheduleError naming the stage and the iterator."""

from __future__ import annotations

import json

import pytest

from autosched.errors import ScheduleError
from autosched.schedule.stage import ATTACHED, INLINED, MIXED, REDUCE, SPATIAL
from autosched.schedule.steps import (
    STEP_REGISTRY,
    AnnotationStep,
    ComputeAtStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    PragmaStep,
    SplitStep,
    Step,
    replay,
)
from tests.workloads_for_tests import (
    conv2d_bias_relu_dag,
    matmul_dag,
    matmul_shared_state,
    seed_conv_state,
)

CONV = "conv2d_nchw"


@pytest.fixture(scope="module")
def conv_dag():
    return conv2d_bias_relu_dag()


@pytest.fixture(scope="module")
def mm_dag():
    return matmul_dag()


# ---- every step kind: record round trip ---------------------------------------------------------


def _examples():
    """(dag, state before, step) for one example of every registered step kind."""
    conv_dag, mm_dag = conv2d_bias_relu_dag(), matmul_dag()
    shared = matmul_shared_state(mm_dag).double_buffer("A.shared").pipeline_stages("A.shared", 3)
    shared = shared.operand_copy("A.shared", "tma")
    sources = [(conv_dag, seed_conv_state(conv_dag)), (mm_dag, shared)]
    extra = mm_dag.get_init_state().cache_write("C").compute_at("C.local", "C", "j")
    sources.append((mm_dag, extra.compute_root("C.local")))
    sources.append((mm_dag, mm_dag.get_init_state().split("C", "k", [4]).rfactor("C", "k_o", 0)))
    sources.append((conv_dag, conv_dag.get_init_state().implicit_gemm(CONV)))
    tensor_core = mm_dag.get_init_state().cache_write("C", "wmma.accumulator")
    mma = tensor_core.tensor_core_instruction("C.wmma.accumulator", "mma")
    sources.append((mm_dag, mma.fragment_double_buffer("C.wmma.accumulator")))
    wgmma = tensor_core.tensor_core_instruction("C.wmma.accumulator", "wgmma")
    sources.append((mm_dag, wgmma.warp_specialize("C.wmma.accumulator")))
    sources.append((mm_dag, shared.narrow_tile("A.shared")))
    found = {}
    for dag, state in sources:
        cur = dag.get_init_state()
        for step in state.steps:
            found.setdefault(step.TAG, (dag, cur, step))
            cur = cur.apply(step)
    return found


EXAMPLES = _examples()


def test_every_registered_step_has_an_example():
    assert set(EXAMPLES) == set(STEP_REGISTRY)
    assert set(STEP_REGISTRY) >= {
        "SP",
        "FSP",
        "FFSP",
        "FU",
        "RE",
        "CA",
        "CR",
        "CI",
        "CHR",
        "CHW",
        "RF",
        "IG",
        "AN",
        "PR",
        "SA",
        "DB",
        "TC",
        "PS",
        "FB",
        "WS",
        "NT",
    }


@pytest.mark.parametrize("tag", sorted(EXAMPLES))
def test_step_record_round_trip(tag):
    _, before, step = EXAMPLES[tag]
    record = json.loads(json.dumps(step.to_record()))
    assert record[0] == tag
    again = Step.from_record(record)
    assert again == step and type(again) is type(step)
    assert again.to_record() == step.to_record()
    a, b = before.apply(step), before.apply(again)
    assert a == b and hash(a) == hash(b) and a.fingerprint() == b.fingerprint()
    assert step.to_python(before, a) == again.to_python(before, b)


def test_malformed_records_are_rejected(conv_dag):
    with pytest.raises(ScheduleError, match="unknown step record"):
        Step.from_record(["XX", 1])
    with pytest.raises(ScheduleError, match="needs 5 fields"):
        Step.from_record(["SP", 3, 0, 1])
    with pytest.raises(ScheduleError, match="stage"):
        replay(conv_dag, [["SP", 42, 0, 1, [2], True]])
    with pytest.raises(ScheduleError, match=CONV):
        replay(conv_dag, [["SP", 3, 0, 1, [1], True], ["FSP", 3, 42, 0, 2]])


# ---- what steps do -------------------------------------------------------------------------------


def test_split_extents(mm_dag):
    s = mm_dag.get_init_state().split("C", "i", [3, 4])  # 64 = ceil(64 / 12) * 3 * 4, rounded up
    assert [(it.name, it.extent, it.kind) for it in s["C"].iters] == [
        ("i_o_o", 6, SPATIAL),
        ("i_o_i", 3, SPATIAL),
        ("i_i", 4, SPATIAL),
        ("j", 64, SPATIAL),
        ("k", 64, REDUCE),
    ]


def test_sketch_split_with_unknown_lengths(mm_dag):
    s = mm_dag.get_init_state().split("C", "k", [None, 4])
    assert [it.extent for it in s["C"].iters] == [64, 64, None, None, 4]
    assert not s.is_complete
    assert "factor=None" in mm_dag.print_python_schedule(s)
    # Following a split with an unknown length gives unknown lengths too.
    assert FollowSplitStep(2, 0, 0, 2).lengths(s) == (None, 4)
    assert FollowSplitStep(2, 0, 0, 1).lengths(s) == (None,)
    assert FollowFusedSplitStep(2, 0, (0,), 0, True).length(s) is None


def test_follow_split_lengths(conv_dag):
    state = seed_conv_state(conv_dag)
    ff_split = next(
        i
        for i, s in enumerate(state.steps)
        if isinstance(s, SplitStep) and s.lengths == (1, 32, 1, 1)
    )
    assert FollowSplitStep(6, 1, ff_split, 3).lengths(state) == (1, 32, 1)
    assert FollowSplitStep(6, 1, ff_split, 2).lengths(state) == (1, 32)
    assert FollowSplitStep(6, 1, ff_split, 4).lengths(state) == (1, 32, 1, 1)
    assert FollowSplitStep(6, 1, ff_split, 5).lengths(state) == (1, 32, 1, 1, 1)  # as TVM
    conv_spatial = [i for i, s in enumerate(state.steps) if isinstance(s, SplitStep)][:4]
    assert FollowFusedSplitStep(0, 0, tuple(conv_spatial), 1, True).length(state) == 32
    assert FollowFusedSplitStep(0, 0, tuple(conv_spatial), 0, True).length(state) == 7


def test_fuse_extent_and_kind(mm_dag):
    s = mm_dag.get_init_state().fuse("C", ["j", "k"])
    assert [(it.name, it.extent, it.kind) for it in s["C"].iters] == [
        ("i", 64, SPATIAL),
        ("j_k_fused", 4096, MIXED),
    ]
    assert s.fuse("C", ["j_k_fused"]) is not None  # fusing one iterator is a no-op


def test_attached_stages_follow_split_and_fuse(mm_dag):
    s = mm_dag.get_init_state().cache_write("C").compute_at("C.local", "C", "j")
    assert s["C.local"].attach == (3, "j") and s["C.local"].compute_at == ATTACHED
    s = s.split("C", "j", [8])
    assert s["C.local"].attach == (3, "j_i")  # the innermost part keeps the attachment
    s = s.fuse("C", ["i", "j_o"])
    s = s.reorder("C", ["i_j_o_fused", "j_i"])
    assert s["C.local"].attach == (3, "j_i")
    s = s.fuse("C", ["i_j_o_fused", "j_i"])
    assert s["C.local"].attach == (3, "i_j_o_fused_j_i_fused")


def test_cache_read_shifts_attachments(mm_dag):
    s = mm_dag.get_init_state().cache_write("C").compute_at("C.local", "C", "j")
    s = s.cache_read("A", "shared", ["C.local"])
    assert [x.name for x in s.stages] == ["A", "A.shared", "B", "C.local", "C"]
    assert s["C.local"].attach == (4, "j")
    assert s["A.shared"].scope == "shared" and s["A.shared"].origin == "cache_read"


def test_pragmas(conv_dag):
    s = conv_dag.get_init_state().pragma(CONV, "nn", "auto_unroll_max_step", 16)
    assert s[CONV].auto_unroll_max_step == 16 and s[CONV].unroll_explicit
    s = s.pragma(CONV, "nn", "unroll_explicit", False)
    assert s[CONV].auto_unroll_max_step == 16 and not s[CONV].unroll_explicit
    assert conv_dag.print_python_schedule(s).splitlines()[-1] == (
        's[conv2d_nchw].pragma(conv2d_nchw_nn, "unroll_explicit", False)'
    )


# ---- invalid steps: ScheduleError naming the stage and the iterator ----------------------------


def raises(fn, *words):
    """Run fn; it must raise ScheduleError whose message holds every word (quoted or not)."""
    with pytest.raises(ScheduleError) as info:
        fn()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in the message: {msg}"
    return msg


def test_split_of_an_iterator_that_no_longer_exists(conv_dag):
    s = conv_dag.get_init_state().split(CONV, "nn", [1, 1])
    raises(lambda: s.split(CONV, "nn", [2]), CONV, "'nn'", "nn_o_o")
    raises(lambda: s.apply(SplitStep(3, 99, None, (2,), True)), CONV, "99")


def test_fuse_of_non_adjacent_iterators(conv_dag):
    s = conv_dag.get_init_state()
    raises(lambda: s.fuse(CONV, ["nn", "yy"]), CONV, "nn", "yy", "not adjacent")
    raises(lambda: s.fuse(CONV, ["ff", "nn"]), CONV, "ff", "nn", "not adjacent")


def test_reorder_that_drops_or_repeats_iterators(conv_dag):
    s = conv_dag.get_init_state()
    all_its = ["nn", "ff", "yy", "xx", "rc", "ry", "rx"]
    raises(lambda: s.reorder(CONV, all_its[:-1]), CONV, "missing ['rx']")
    raises(
        lambda: s.reorder(CONV, all_its[:-1] + ["nn"]), CONV, "missing ['rx']", "repeated ['nn']"
    )


def test_compute_at_that_would_create_a_cycle(conv_dag):
    s = conv_dag.get_init_state().compute_at(CONV, "compute", "i3")
    raises(lambda: s.compute_at("compute", CONV, "rx"), "'compute'", CONV, "rx", "cycle")
    raises(lambda: s.compute_at(CONV, CONV, "xx"), CONV, "xx", "cycle")


def test_compute_at_a_stage_that_is_not_a_consumer(conv_dag, mm_dag):
    s = conv_dag.get_init_state()
    raises(lambda: s.compute_at("T_add", CONV, "xx"), "'T_add'", CONV, "xx", "does not consume")
    m = mm_dag.get_init_state().cache_read("A", "shared", ["C"]).cache_read("B", "shared", ["C"])
    raises(
        lambda: m.compute_at("A.shared", "B.shared", "ax1"),
        "A.shared",
        "B.shared",
        "ax1",
        "does not consume",
    )
    # A consumer further down the chain is fine (pad_temp -> conv -> T_add).
    assert s.compute_at("pad_temp", "T_add", "ax3")["pad_temp"].attach == (5, "ax3")


def test_compute_inline_of_an_output_or_a_reduction(conv_dag):
    s = conv_dag.get_init_state()
    # No iterator is involved in inlining: the message names the stage and the reason.
    raises(lambda: s.compute_inline("compute"), "'compute'", "output")
    raises(lambda: s.compute_inline(CONV), CONV, "reduction")
    raises(lambda: s.compute_inline("data"), "'data'", "placeholder")
    attached = s.compute_at(CONV, "T_add", "ax3")
    raises(lambda: attached.compute_inline("T_add"), "'T_add'", "computed at")
    assert s.compute_inline("T_add")["T_add"].compute_at == INLINED


def test_binding_a_thread_axis_twice_with_different_extents(conv_dag):
    s = conv_dag.get_init_state().split("compute", "i1", [32])
    s = s.bind("compute", "i1_i", "threadIdx.x")
    raises(
        lambda: s.bind("compute", "i1_o", "threadIdx.x"),
        "'compute'",
        "threadIdx.x",
        "i1_o",
        "i1_i",
        "different extents",
    )
    # The same extent twice is allowed (cooperative fetching binds like this).
    t = conv_dag.get_init_state().split("compute", "i1", [4, 4])
    t = t.bind("compute", "i1_o_i", "threadIdx.x").bind("compute", "i1_i", "threadIdx.x")
    assert [it.annotation for it in t["compute"].iters][1:4] == [
        "none",
        "threadIdx.x",
        "threadIdx.x",
    ]


def test_other_invalid_steps(conv_dag, mm_dag):
    s = conv_dag.get_init_state().bind("compute", "i0", "blockIdx.x")
    raises(lambda: s.split("compute", "i0", [2]), "'compute'", "'i0'", "annotated")
    raises(lambda: s.fuse("compute", ["i0", "i1"]), "'compute'", "'i0'", "annotated")
    raises(lambda: s.vectorize("compute", "i0"), "compute.i0", "already annotated")
    raises(lambda: s.apply(AnnotationStep(6, 1, "warp")), "compute.i1", "unknown annotation")
    raises(lambda: s.apply(PragmaStep(6, 1, "unroll_everything$1")), "unknown pragma")
    raises(lambda: s.split("compute", "i1", [0]), "compute.i1", "positive")
    raises(lambda: s.apply(ComputeAtStep(0, 6, 0)), "'data'", "compute.i0", "placeholder")
    raises(
        lambda: s.cache_read("kernel", "shared", ["compute"]),
        "'compute'",
        "does not read",
        "'kernel'",
    )
    raises(lambda: s.cache_read("kernel", "global", [CONV]), "scope")
    m = mm_dag.get_init_state().split("C", "i", [2])
    raises(lambda: m.cache_write("C"), "'C'", "already transformed")
    raises(lambda: m.storage_align("C", "j", 0, 0), "'C'", "factor")
    raises(lambda: m.apply(FollowSplitStep(2, 0, 5, 2)), "no step 5")


def test_storage_align_names_an_axis_by_the_outermost_part_of_its_splits(mm_dag):
    """A stage its sketch split is padded after: the outer part of a split of a split of `i`
    stands for `i`; an inner part names no axis."""
    s = mm_dag.get_init_state().split("C", "i", [4]).split("C", "i_o", [2])
    padded = s.storage_align("C", "i_o_o", 32, 8)
    assert padded["C"].storage_align == (0, 32, 8)
    assert "s[C].storage_align(C_i, 32, 8)" in mm_dag.print_python_schedule(padded)
    assert mm_dag.replay_steps(padded.steps).key() == padded.key()
    raises(lambda: s.storage_align("C", "i_i", 32, 8), "C.i_i", "align one of the axes")
