"""Loop states: a hand-built tiled matmul, replay through records (in process and in a fresh
process), random valid step sequences, and the cost of apply + hash."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autosched.errors import ScheduleError
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, INLINED, ROOT
from autosched.schedule.steps import Step, replay
from tests.workloads_for_tests import (
    PROPERTY_DAGS,
    conv2d_bias_relu_dag,
    matmul_dag,
    matmul_shared_state,
    random_states,
    seed_conv_state,
    summary_json,
)

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO_DIR = TESTS_DIR.parent


def through_json(state: State) -> list:
    """The state's steps as a record would hold them: to_record -> JSON text -> lists."""
    return json.loads(json.dumps([s.to_record() for s in state.steps]))


def assert_same_state(a: State, b: State) -> None:
    assert a == b
    assert hash(a) == hash(b)
    assert a.fingerprint() == b.fingerprint()
    assert [s.summary() for s in a.stages] == [s.summary() for s in b.stages]
    assert str(a) == str(b)


# ---- a hand-built tiled matmul with shared-memory caches ---------------------------------------

MATMUL_SCHEDULE = """\
C_i, C_j, C_k = tuple(C.op.axis) + tuple(C.op.reduce_axis)
C_local, = s.cache_write([C], "local")
C_local_i_c, C_local_j_c, C_local_k = tuple(C_local.op.axis) + tuple(C_local.op.reduce_axis)
C_i, C_j = tuple(C.op.axis) + tuple(C.op.reduce_axis)
C_local_i_c_o_i, C_local_i_c_i = s[C_local].split(C_local_i_c, factor=2)
C_local_i_c_o_o_i, C_local_i_c_o_i = s[C_local].split(C_local_i_c_o_i, factor=2)
C_local_i_c_o_o_o_i, C_local_i_c_o_o_i = s[C_local].split(C_local_i_c_o_o_i, factor=8)
C_local_i_c_o_o_o_o, C_local_i_c_o_o_o_i = s[C_local].split(C_local_i_c_o_o_o_i, factor=1)
C_local_j_c_o_i, C_local_j_c_i = s[C_local].split(C_local_j_c, factor=2)
C_local_j_c_o_o_i, C_local_j_c_o_i = s[C_local].split(C_local_j_c_o_i, factor=1)
C_local_j_c_o_o_o_i, C_local_j_c_o_o_i = s[C_local].split(C_local_j_c_o_o_i, factor=8)
C_local_j_c_o_o_o_o, C_local_j_c_o_o_o_i = s[C_local].split(C_local_j_c_o_o_o_i, factor=2)
C_local_k_o_i, C_local_k_i = s[C_local].split(C_local_k, factor=2)
C_local_k_o_o, C_local_k_o_i = s[C_local].split(C_local_k_o_i, factor=4)
s[C_local].reorder(C_local_i_c_o_o_o_o, C_local_j_c_o_o_o_o, C_local_i_c_o_o_o_i, C_local_j_c_o_o_o_i, C_local_i_c_o_o_i, C_local_j_c_o_o_i, C_local_k_o_o, C_local_k_o_i, C_local_i_c_o_i, C_local_j_c_o_i, C_local_k_i, C_local_i_c_i, C_local_j_c_i)
C_i_o_i, C_i_i = s[C].split(C_i, factor=4)
C_i_o_o_i, C_i_o_i = s[C].split(C_i_o_i, factor=8)
C_i_o_o_o, C_i_o_o_i = s[C].split(C_i_o_o_i, factor=1)
C_j_o_i, C_j_i = s[C].split(C_j, factor=2)
C_j_o_o_i, C_j_o_i = s[C].split(C_j_o_i, factor=8)
C_j_o_o_o, C_j_o_o_i = s[C].split(C_j_o_o_i, factor=2)
s[C].reorder(C_i_o_o_o, C_j_o_o_o, C_i_o_o_i, C_j_o_o_i, C_i_o_i, C_j_o_i, C_i_i, C_j_i)
s[C_local].compute_at(s[C], C_j_o_i)
A_shared = s.cache_read(A, "shared", [C_local])
A_shared_ax0, A_shared_ax1 = tuple(A_shared.op.axis)
s[A_shared].compute_at(s[C_local], C_local_k_o_o)
B_shared = s.cache_read(B, "shared", [C_local])
B_shared_ax0, B_shared_ax1 = tuple(B_shared.op.axis)
s[B_shared].compute_at(s[C_local], C_local_k_o_o)
s[A_shared].storage_align(A_shared_ax0, 32, 1)
C_i_o_o_o_j_o_o_o_fused = s[C].fuse(C_i_o_o_o, C_j_o_o_o)
s[C].bind(C_i_o_o_o_j_o_o_o_fused, te.thread_axis("blockIdx.x"))
C_i_o_o_i_j_o_o_i_fused = s[C].fuse(C_i_o_o_i, C_j_o_o_i)
s[C].bind(C_i_o_o_i_j_o_o_i_fused, te.thread_axis("vthread"))
C_i_o_i_j_o_i_fused = s[C].fuse(C_i_o_i, C_j_o_i)
s[C].bind(C_i_o_i_j_o_i_fused, te.thread_axis("threadIdx.x"))
A_shared_ax0_ax1_fused = s[A_shared].fuse(A_shared_ax0, A_shared_ax1)
A_shared_ax0_ax1_fused_o, A_shared_ax0_ax1_fused_i = s[A_shared].split(A_shared_ax0_ax1_fused, factor=2)
s[A_shared].vectorize(A_shared_ax0_ax1_fused_i)
A_shared_ax0_ax1_fused_o_o, A_shared_ax0_ax1_fused_o_i = s[A_shared].split(A_shared_ax0_ax1_fused_o, factor=64)
s[A_shared].bind(A_shared_ax0_ax1_fused_o_i, te.thread_axis("threadIdx.x"))
B_shared_ax0_ax1_fused = s[B_shared].fuse(B_shared_ax0, B_shared_ax1)
B_shared_ax0_ax1_fused_o, B_shared_ax0_ax1_fused_i = s[B_shared].split(B_shared_ax0_ax1_fused, factor=1)
s[B_shared].vectorize(B_shared_ax0_ax1_fused_i)
B_shared_ax0_ax1_fused_o_o, B_shared_ax0_ax1_fused_o_i = s[B_shared].split(B_shared_ax0_ax1_fused_o, factor=64)
s[B_shared].bind(B_shared_ax0_ax1_fused_o_i, te.thread_axis("threadIdx.x"))
s[C_local].pragma(C_local_i_c_o_o_o_o, "auto_unroll_max_step", 64)
s[C_local].pragma(C_local_i_c_o_o_o_o, "unroll_explicit", True)
"""  # noqa: E501 (the printout's lines as printed)


@pytest.fixture(scope="module")
def mm():
    dag = matmul_dag()
    return dag, matmul_shared_state(dag)


def test_matmul_state_prints(mm):
    dag, state = mm
    assert dag.print_python_schedule(state) == MATMUL_SCHEDULE


def test_matmul_state_structure(mm):
    _, state = mm
    assert [s.name for s in state.stages] == ["A", "A.shared", "B", "B.shared", "C.local", "C"]
    local, out = state["C.local"], state["C"]
    assert local.scope == "local" and local.attach == (5, "i_o_i_j_o_i_fused")
    assert local.compute_at == ATTACHED and out.compute_at == ROOT
    for cache in ("A.shared", "B.shared"):
        s = state[cache]
        assert s.scope == "shared" and s.attach == (4, "k_o_o")
        assert [it.annotation for it in s.iters] == ["none", "threadIdx.x", "vectorize"]
        assert s.iters[1].extent == 64  # the thread count: 8 x 8 from the i and j tiles
    assert state["A.shared"].storage_align == (0, 32, 1)
    assert [(it.name, it.extent, it.annotation) for it in out.iters[:3]] == [
        ("i_o_o_o_j_o_o_o_fused", 4, "blockIdx.x"),
        ("i_o_o_i_j_o_o_i_fused", 2, "vthread"),
        ("i_o_i_j_o_i_fused", 64, "threadIdx.x"),
    ]
    assert local.auto_unroll_max_step == 64 and local.unroll_explicit
    # C.local reads the shared copies, not A and B.
    assert [(a.name, b.name) for a, b in local.redirects] == [("A", "A.shared"), ("B", "B.shared")]
    assert state.is_complete


def test_a_stage_gives_its_compute_op_and_axes_a_placeholder_none(mm):
    _, state = mm
    out = state["C"]
    assert out.compute_op is out.op and out.axes == out.op.axis and len(out.axes) == 2
    placeholder = state["A"]
    assert placeholder.axes == ()
    with pytest.raises(ScheduleError, match="'A' is a placeholder"):
        placeholder.compute_op  # noqa: B018 (the property raises)


def test_matmul_state_replays_through_json(mm):
    dag, state = mm
    records = through_json(state)
    steps = [Step.from_record(r) for r in records]
    assert [s.to_record() for s in steps] == [s.to_record() for s in state.steps]
    again = replay(dag, records)
    assert_same_state(state, again)
    assert dag.print_python_schedule(again) == MATMUL_SCHEDULE
    # Replaying on an equal DAG built separately gives the same fingerprint too.
    other = matmul_dag()
    assert replay(other, records).fingerprint() == state.fingerprint()


def test_different_tiles_differ(mm):
    dag, state = mm
    other = matmul_shared_state(dag, tiles={"i": (1, 8, 2, 2), "j": (2, 8, 1, 2), "k": (2, 4)})
    assert other != state and other.fingerprint() != state.fingerprint()
    assert [s.summary() for s in other.stages] != [s.summary() for s in state.stages]


def test_seed_conv_state_replays_through_json():
    dag = conv2d_bias_relu_dag()
    state = seed_conv_state(dag)
    assert_same_state(state, replay(dag, through_json(state)))
    assert state["T_add"].compute_at == INLINED and state["pad_temp"].compute_at == INLINED
    assert state["kernel.shared"].attach == (state.stage_index("conv2d_nchw"), "rx_o_o")
    assert state["conv2d_nchw"].attach == (
        state.stage_index("compute"),
        "i0_o_i_i1_o_i_fused_i2_o_i_fused_i3_o_i_fused",
    )


def test_states_are_values(mm):
    """Applying a step leaves the state it was applied to unchanged."""
    dag, state = mm
    before = [s.summary() for s in state.stages]
    state.split("C", 3, [2])
    state.compute_root("C.local")
    assert [s.summary() for s in state.stages] == before
    assert dag.get_init_state() is dag.get_init_state()  # the initial state is shared


# ---- random valid step sequences, replayed in a fresh process ----------------------------------

N_CASES = 150  # per DAG
SUBPROCESS = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from tests.workloads_for_tests import PROPERTY_DAGS, summary_json
    from autosched.schedule.steps import replay
    cases = json.load(open(sys.argv[3]))
    dags = {name: make() for name, make in PROPERTY_DAGS.items()}
    out = []
    for case in cases:
        state = replay(dags[case["dag"]], case["records"])
        out.append({"fingerprint": state.fingerprint(), "summary": summary_json(state),
                    "python": dags[case["dag"]].print_python_schedule(state)})
    json.dump(out, sys.stdout)
""")


def test_random_step_sequences_replay_in_a_subprocess(tmp_path):
    rng = random.Random(20240603)
    cases, states, tags = [], [], set()
    for name, make in PROPERTY_DAGS.items():
        dag = make()
        for _ in range(N_CASES):
            state, _ = random_states(dag, rng, rng.randint(1, 16))
            records = through_json(state)
            again = replay(dag, records)  # in process first: a cheaper failure to read
            assert_same_state(state, again)
            cases.append({"dag": name, "records": records})
            states.append((dag, state))
            tags.update(s.TAG for s in state.steps)
    assert tags >= {
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
        "AN",
        "PR",
        "SA",
    }
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    proc = subprocess.run(
        [sys.executable, "-c", SUBPROCESS, str(REPO_DIR), str(TESTS_DIR), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == len(states) == 2 * N_CASES
    for (dag, state), res, case in zip(states, results, cases, strict=True):
        assert res["fingerprint"] == state.fingerprint(), case
        assert res["summary"] == json.loads(json.dumps(summary_json(state))), case
        assert res["python"] == dag.print_python_schedule(state), case


# ---- the cost of apply + hash --------------------------------------------------------------------


def test_benchmark_replay_and_hash_of_the_seed_state():
    dag = conv2d_bias_relu_dag()
    steps = seed_conv_state(dag).steps
    replay(dag, steps)  # warm up
    batches, per_batch = 10, 20
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            hash(replay(dag, steps))
        times.append((time.perf_counter() - t0) / per_batch)
    best, mean = min(times), sum(times) / len(times)
    print(
        f"\nreplay + hash of the seed conv2d state ({len(steps)} steps), "
        f"{batches * per_batch} repetitions: {best * 1e3:.3f} ms per state (best batch), "
        f"{mean * 1e3:.3f} ms mean"
    )
    assert len(steps) >= 30
    assert best < 5e-3  # generous, for loaded CI machines; the target is well under 1 ms
