"""rfactor (RfactorStep, "RF"): record round trip and replay, the printed Python line, every
invalid use raises ScheduleError naming stage and iterator, and rfactor'ed matmul, row-sum,
softmax and conv2d states lower and run on the CPU interpreter equal to numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.errors import ScheduleError
from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, REDUCE, SPATIAL
from autosched.schedule.steps import RfactorStep, Step, print_python_schedule, replay
from autosched.task.evaluate import evaluate
from tests.codegen.test_codegen_cuda import compile_ok, needs_nvcc
from tests.workloads_for_tests import conv2d_bias_relu_dag, matmul_dag

# ---- helpers -------------------------------------------------------------------------------


def run_lowered(state: State, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Lower the state, run it on the CPU interpreter; the output arrays by name. Outputs and
    temporaries start as NaN, so a partial sum that is read before it is written shows up."""
    program = lower(state)
    arrays = {}
    for b in program.params:
        arrays[b.name] = inputs[b.name] if b.name in inputs else np.full(b.shape, np.nan, b.dtype)
    run_program(program, arrays)
    return {b.name: arrays[b.name] for b in program.outputs}


def random_inputs(dag: ComputeDAG, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        t.name: rng.uniform(-1, 1, t.shape).astype(t.dtype)
        for t in dag.tensors
        if t.op not in dag.outputs
    }


def bind_spatial(state: State, stage: str, threads: int) -> State:
    """Fuse the stage's leading spatial loops, split by `threads`, bind blockIdx.x / threadIdx.x."""
    names = [it.name for it in state[stage].iters if it.kind == SPATIAL]
    state = state.fuse(stage, names)
    fused = state[stage].iters[0].name
    state = state.split(stage, fused, [threads])
    return state.bind(stage, f"{fused}_o", "blockIdx.x").bind(stage, f"{fused}_i", "threadIdx.x")


def rowsum_dag(n: int, k: int) -> ComputeDAG:
    x = te.placeholder((n, k), name="x")
    rk = te.reduce_axis((0, k), name="k")
    return ComputeDAG([x, te.compute((n,), lambda i: te.sum(x[i, rk], axis=rk), name="S")])


def softmax_dag(n: int, m: int) -> ComputeDAG:
    x = te.placeholder((n, m), name="x")
    return ComputeDAG([x, topi.nn.softmax(x)])


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def rf_matmul_state(
    dag: ComputeDAG, factor: int, part: str, factor_axis: int, inner_to_outer: bool = True
) -> State:
    """Split the matmul's k by `factor` and factor out its outer (`o`) or inner (`i`) part."""
    s = dag.get_init_state().split("C", "k", [factor], inner_to_outer)
    return s.rfactor("C", f"k_{part}", factor_axis)


def _elementwise_after_matmul() -> ComputeDAG:
    a = te.placeholder((4, 8), name="A")
    b = te.placeholder((8, 4), name="B")
    rk = te.reduce_axis((0, 8), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, rk] * b[rk, j], axis=rk), name="C")
    d = te.compute((4, 4), lambda i, j: c[i, j] * 2.0, name="D")
    e = te.compute((4, 4), lambda i, j: d[i, j] + 1.0, name="E")
    return ComputeDAG([a, b, e])


# ---- the step as data ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def mm():
    return matmul_dag(8, 6, 10)


def test_record_round_trip_and_replay_equality(mm):
    state = rf_matmul_state(mm, 4, "o", 1)
    step = state.steps[-1]
    assert step == RfactorStep(2, 2, 1)  # stage C, iterator k_o of (i, j, k_o, k_i)
    record = json.loads(json.dumps(step.to_record()))
    assert record == ["RF", 2, 2, 1]
    assert Step.from_record(record) == step
    records = json.loads(json.dumps([s.to_record() for s in state.steps]))
    again = replay(mm, records)
    assert again == state and hash(again) == hash(state)
    assert again.fingerprint() == state.fingerprint()
    assert [s.summary() for s in again.stages] == [s.summary() for s in state.stages]
    assert str(again) == str(state)
    other = rf_matmul_state(mm, 4, "o", 0)
    assert other != state and other.fingerprint() != state.fingerprint()


def test_new_stages_and_their_fresh_iterators(mm):
    s = mm.get_init_state().split("C", "i", [2]).split("C", "k", [4])
    s = s.rfactor("C", "k_i", 2)
    assert [st.name for st in s.stages] == ["A", "B", "C.rf", "C"]
    rf, final = s["C.rf"], s["C"]
    # The rf stage: the original spatial axes (its earlier i split is gone), k_i as spatial axis 2,
    # the rest of the split reduce axis as its reduction.
    assert [(it.name, it.extent, it.kind) for it in rf.iters] == [
        ("i", 8, SPATIAL),
        ("j", 6, SPATIAL),
        ("k_i", 4, SPATIAL),
        ("k_o", 3, REDUCE),
    ]
    assert rf.iters == rf.root_iters and rf.relations == () and rf.origin == "rfactor"
    assert [(it.name, it.extent, it.kind) for it in final.iters] == [
        ("i", 8, SPATIAL),
        ("j", 6, SPATIAL),
        ("k_i_v", 4, REDUCE),
    ]
    assert rf.op.shape == (8, 6, 4)
    assert final.produces is mm.outputs[0] and final.op is not mm.outputs[0]
    # Following steps use the new stages like any other.
    s = s.compute_at("C.rf", "C", "j").split("C.rf", "k_o", [2])
    assert s["C.rf"].compute_at == ATTACHED and s["C.rf"].attach == (2 + 1, "j")


def test_later_stages_attached_elsewhere_follow_the_inserted_stage():
    dag = _elementwise_after_matmul()
    s = dag.get_init_state().bind("E", "i", "blockIdx.x").bind("E", "j", "threadIdx.x")
    s = s.compute_at("D", "E", "j")
    assert s["D"].attach == (4, "j")
    s = s.split("C", "k", [3]).rfactor("C", "k_o", 1)
    assert [st.name for st in s.stages] == ["A", "B", "C.rf", "C", "D", "E"]
    assert s["D"].attach == (5, "j")
    inputs = random_inputs(dag)
    out = run_lowered(s, inputs)
    np.testing.assert_allclose(out["E"], inputs["A"] @ inputs["B"] * 2 + 1, rtol=1e-5)


def test_printed_python_schedule(mm):
    s = rf_matmul_state(mm, 4, "o", 0)
    assert print_python_schedule(s) == (
        "C_i, C_j, C_k = tuple(C.op.axis) + tuple(C.op.reduce_axis)\n"
        "C_k_o, C_k_i = s[C].split(C_k, factor=4)\n"
        "C_rf = s.rfactor(C, C_k_o, factor_axis=0)\n"
        "C_rf_k_o, C_rf_i, C_rf_j, C_rf_k_i = tuple(C_rf.op.axis) + tuple(C_rf.op.reduce_axis)\n"
        "C_i, C_j, C_k_o_v = tuple(s[C].op.axis) + tuple(s[C].op.reduce_axis)\n"
    )


# ---- invalid uses --------------------------------------------------------------------------


def _name_clash_dag() -> ComputeDAG:
    x = te.placeholder((4, 8), name="x")
    rk = te.reduce_axis((0, 8), name="k")
    return ComputeDAG([x, te.compute((4,), lambda k_v: te.sum(x[k_v, rk], axis=rk), name="S")])


def _invalid_cases():
    """case -> (state, the rejected call, the message it must raise)."""
    mm = matmul_dag(8, 6, 10)
    init = mm.get_init_state()
    split = init.split("C", "k", [4])
    ew = _elementwise_after_matmul().get_init_state()
    c_local = init.cache_write("C").split("C.local", "k", [2])
    c_local = c_local.cache_read("A", "local", ["C.local"]).compute_at("A.local", "C.local", "k_o")

    def rf(stage, it, factor_axis=0):
        return lambda state: state.rfactor(stage, it, factor_axis)

    return {
        "spatial iterator": (
            init,
            rf("C", "j"),
            r"rfactor of C\.j: 'j' is a spatial iterator, not a reduce",
        ),
        "mixed iterator": (
            init.fuse("C", ["j", "k"]),
            rf("C", "j_k_fused"),
            r"rfactor of C\.j_k_fused: 'j_k_fused' is a mixed iterator",
        ),
        "linked to a spatial iterator": (
            split.fuse("C", ["j", "k_o"]),
            rf("C", "k_i"),
            r"rfactor of C\.k_i: 'k_i' is linked through splits/fuses to 'j', a spatial iterator",
        ),
        "not a reduction": (ew, rf("D", "i"), r"rfactor of D\.i: stage 'D' is not a reduction"),
        "inlined stage": (
            ew.compute_inline("D"),
            rf("D", "i"),
            r"rfactor of D\.i: stage 'D' is inlined",
        ),
        "placeholder": (
            init,
            lambda state: state.apply(RfactorStep(0, 0, 0)),
            r"rfactor: 'A' is a placeholder",
        ),
        "stages attached to it": (
            c_local,
            rf("C.local", "k_o"),
            r"rfactor of C\.local\.k_o: other stages are computed at 'C\.local' "
            r"\(\['A\.local'\]\)",
        ),
        "annotated iterator": (
            split.bind("C", "i", "blockIdx.x"),
            rf("C", "k_o"),
            r"rfactor of C\.k_o: iterators \['i'\] of 'C' are annotated",
        ),
        "factor axis too large": (
            split,
            rf("C", "k_o", 3),
            r"rfactor of C\.k_o: factor_iter_id 3 is out of range",
        ),
        "negative factor axis": (
            split,
            rf("C", "k_o", -1),
            r"rfactor of C\.k_o: factor_iter_id -1 is out of range",
        ),
        "unknown split length": (
            init.split("C", "k", [None]),
            rf("C", "k_o"),
            r"rfactor of C\.k_o: the extent of 'k_(o|i)' is unknown",
        ),
        "iterator out of range": (
            split,
            lambda state: state.apply(RfactorStep(2, 7, 0)),
            r"stage 'C' has 4 iterators; index 7",
        ),
        "final axis name taken": (
            _name_clash_dag().get_init_state(),
            rf("S", "k"),
            r"rfactor of S\.k: the final reduce axis name 'k_v' is taken",
        ),
    }


INVALID = _invalid_cases()


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_rfactor_raises_naming_stage_and_iterator(case):
    state, call, pattern = INVALID[case]
    with pytest.raises(ScheduleError, match=pattern):
        call(state)


def test_a_rejected_step_leaves_the_state_unchanged(mm):
    state = mm.get_init_state()
    with pytest.raises(ScheduleError):
        state.rfactor("C", "i", 0)
    assert state.steps == () and [s.name for s in state.stages] == ["A", "B", "C"]


# ---- results equal numpy -------------------------------------------------------------------

MATMUL_CASES = [  # (factor, part factored out, factor axis, inner_to_outer)
    (5, "o", 0, True),  # divides 10
    (4, "o", 1, True),  # does not divide: k_o * 4 + k_i < 10 guards the tail
    (4, "i", 2, True),
    (5, "i", 0, True),
    (3, "o", 2, False),  # nparts=3: k_o has 3 parts of 4
    (3, "i", 1, False),
]


@pytest.mark.parametrize("factor,part,factor_axis,inner_to_outer", MATMUL_CASES)
def test_matmul_rfactor_matches_numpy(mm, factor, part, factor_axis, inner_to_outer):
    s = rf_matmul_state(mm, factor, part, factor_axis, inner_to_outer)
    s = bind_spatial(bind_spatial(s, "C.rf", 32), "C", 16)
    inputs = random_inputs(mm)
    out = run_lowered(s, inputs)
    np.testing.assert_allclose(out["C"], inputs["A"] @ inputs["B"], rtol=1e-5, atol=1e-6)


def test_unscheduled_rfactor_matches_numpy(mm):
    inputs = random_inputs(mm, seed=1)
    out = run_lowered(rf_matmul_state(mm, 4, "i", 1), inputs)
    np.testing.assert_allclose(out["C"], inputs["A"] @ inputs["B"], rtol=1e-5, atol=1e-6)


def test_nested_non_dividing_splits_are_each_guarded(mm):
    """k = 10 split by 4 (k_i: 4), k_i split by 3 (k_i_o: 2, k_i_i: 3): k_i_o * 3 + k_i_i reaches
    5, past k_i's extent, which would count elements of the next k_o block twice."""
    s = mm.get_init_state().split("C", "k", [4]).split("C", "k_i", [3]).rfactor("C", "k_o", 0)
    assert "(((k_i_o*3)+k_i_i)<4)" in repr(s["C.rf"].op.body.condition).replace(" ", "")
    inputs = random_inputs(mm, seed=2)
    out = run_lowered(bind_spatial(s, "C.rf", 32), inputs)
    np.testing.assert_allclose(out["C"], inputs["A"] @ inputs["B"], rtol=1e-5, atol=1e-6)


def test_rfactor_of_an_unsplit_reduce_axis(mm):
    """Nothing is left to reduce in the rf op: it holds one product per (i, j, k)."""
    s = mm.get_init_state().rfactor("C", "k", 2)
    assert s["C.rf"].op.reduce_axis == () and s["C.rf"].op.shape == (8, 6, 10)
    inputs = random_inputs(mm, seed=3)
    out = run_lowered(s, inputs)
    np.testing.assert_allclose(out["C"], inputs["A"] @ inputs["B"], rtol=1e-5, atol=1e-6)


def test_rf_stage_computed_inside_its_consumer_per_thread(mm):
    """The usual use: the rf stage at the consumer's thread loop, in registers."""
    s = rf_matmul_state(mm, 4, "i", 0)
    s = bind_spatial(s, "C", 16)
    s = s.compute_at("C.rf", "C", s["C"].iters[1].name)
    inputs = random_inputs(mm, seed=4)
    program = lower(s)
    assert [b.scope for b in program.kernels[0].allocs] == ["local"] and len(program.kernels) == 1
    out = run_lowered(s, inputs)
    np.testing.assert_allclose(out["C"], inputs["A"] @ inputs["B"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k,factor,part", [(16, 4, "o"), (13, 4, "o"), (13, 4, "i"), (13, 5, "i")])
def test_rowsum_rfactor_matches_numpy(k, factor, part):
    dag = rowsum_dag(6, k)
    s = dag.get_init_state().split("S", "k", [factor]).rfactor("S", f"k_{part}", 1)
    s = bind_spatial(bind_spatial(s, "S.rf", 8), "S", 4)
    inputs = random_inputs(dag)
    out = run_lowered(s, inputs)
    np.testing.assert_allclose(out["S"], inputs["x"].sum(axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("part", ["o", "i"])
def test_softmax_max_and_sum_rfactor_matches_numpy(part):
    """Both reductions of a softmax (max and sum) factored, the exp inlined into the sum's rf."""
    dag = softmax_dag(5, 11)
    s = dag.get_init_state().compute_inline("T_softmax_exp")
    for red in ("T_softmax_maxelem", "T_softmax_expsum"):
        s = s.split(red, "k", [4]).rfactor(red, f"k_{part}", 0)
        s = bind_spatial(s, f"{red}.rf", 8)
    inputs = random_inputs(dag)
    out = run_lowered(s, inputs)
    np.testing.assert_allclose(out["T_softmax_norm"], np_softmax(inputs["x"]), rtol=1e-5)


def test_conv2d_rfactor_keeps_untouched_reduce_axes_and_decomposes_fused_ones():
    dag = conv2d_bias_relu_dag(n=1, h=4, w=4, co=4, ci=6)
    conv = "conv2d_nchw"
    s = dag.get_init_state().compute_inline("pad_temp")
    s = s.split(conv, "rc", [4])  # 6 = 2 * 4, not dividing
    s = s.fuse(conv, ["ry", "rx"]).split(conv, "ry_rx_fused", [2])  # 9 = 5 * 2, not dividing
    by_outer = s.rfactor(conv, "rc_o", 4)
    assert [a.name for a in by_outer[f"{conv}.rf"].op.reduce_axis] == ["ry", "rx", "rc_i"]
    by_fused = s.rfactor(conv, "ry_rx_fused_o", 0)
    assert [a.name for a in by_fused[f"{conv}.rf"].op.reduce_axis] == ["rc", "ry_rx_fused_i"]
    inputs = random_inputs(dag)
    expected = evaluate(dag, inputs)["compute"]
    for state in (by_outer, by_fused):
        state = bind_spatial(state, f"{conv}.rf", 32)
        out = run_lowered(state, inputs)
        np.testing.assert_allclose(out["compute"], expected, rtol=1e-5, atol=1e-6)


@needs_nvcc
def test_rfactor_kernels_compile_with_nvcc(mm):
    s = rf_matmul_state(mm, 4, "o", 0)
    s = bind_spatial(bind_spatial(s, "C.rf", 32), "C", 16)
    program = lower(s)
    assert len(program.kernels) == 2
    source = compile_ok(program)
    assert source == codegen_program(program)
