"""Row statistics held in registers (lower/row_scalars.py): in the device program, the loops of
a normalisation read its statistics from registers filled once before them, divide by the
row's sum as a multiply by its reciprocal, and still compute the DAG on the interpreter; a loop
that writes the statistic, or holds a barrier, keeps its reads, and so does a kernel without a
cross-thread reduction."""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower.ir import int32
from autosched.lower.lowering import lower
from autosched.lower.passes import device_program
from autosched.lower.row_scalars import hoist_row_scalars
from autosched.schedule.compute_dag import ComputeDAG
from autosched.te.expr import BinOp, Const, Load, Var
from autosched.te.visitor import walk
from benchmarks.memory_bound import rms_norm
from tests.interpreter_check import interpret_and_compare
from tests.lower.test_cross_thread import softmax_state
from tests.workloads_for_tests import softmax_dag


def loop_reads(s: ir.Stmt) -> list[Load]:
    """The loads of every statement inside a loop of `s`."""
    out = []
    for loop in ir.iter_stmts(s):
        if isinstance(loop, ir.For):
            for st in ir.iter_stmts(loop.body):
                if isinstance(st, ir.Store):
                    out += [n for n in walk(st.value) if isinstance(n, Load)]
    return out


def the_output_store(kernel: ir.Kernel, name: str) -> ir.Store:
    (store,) = [
        s for s in ir.iter_stmts(kernel.body) if isinstance(s, ir.Store) and s.buffer.name == name
    ]
    return store


def test_the_softmax_output_reads_its_statistics_from_registers():
    dag = softmax_dag(3, 96)
    program = device_program(lower(softmax_state(dag, 32)), verify=True)
    (kernel,) = program.kernels
    store = the_output_store(kernel, "T_softmax_norm")
    read = {n.buffer.name: n.buffer.scope for n in walk(store.value) if isinstance(n, Load)}
    assert read == {
        "x": "global",
        "T_softmax_maxelem_reg_1": "local",
        "T_softmax_expsum_inv": "local",
    }
    ops = {n.op for n in walk(store.value) if isinstance(n, BinOp)}
    assert "/" not in ops and "*" in ops
    interpret_and_compare(dag, program, rtol=1e-5)


def test_the_rms_norms_rsqrt_is_computed_once_per_thread():
    dag = ComputeDAG(rms_norm(2, 128))
    out, ms = "rms", "ms"
    s = dag.get_init_state().split(out, "j", [32]).bind(out, "j_i", "threadIdx.x")
    s = s.follow_split(ms, "k", 0, 1).bind(ms, "k_i", "threadIdx.x")
    s = s.compute_at(ms, out, "i").bind(out, "i", "blockIdx.x")
    program = device_program(lower(s), verify=True)
    (kernel,) = program.kernels
    calls = [n for n in walk(the_output_store(kernel, out).value) if not isinstance(n, Load)]
    assert not any(getattr(n, "func", None) == "rsqrt" for n in calls)
    assert all(n.buffer.scope != "shared" for n in loop_reads(kernel.body))
    interpret_and_compare(dag, program, rtol=1e-5)


def scalar_loop(s: ir.Buffer, body_extra: list[ir.Stmt], reduced: bool = True) -> ir.Kernel:
    """s[0] = the sum of x[0] over the block's thread (where `reduced`), then y[i] = x[i] / s[0]
    over a loop of 4, with `body_extra` in the loop too."""
    x = ir.Buffer("x", (4,), "float32")
    y = ir.Buffer("y", (4,), "float32")
    i = Var("i")
    scaled = BinOp("/", Load(x, (i,)), Load(s, (int32(0),)), "float32")
    loop = ir.For(i, 4, "serial", ir.seq([*body_extra, ir.Store(y, i, scaled)]))
    total = ir.AllReduce("sum", Load(x, (int32(0),)), None, s, int32(0), "threadIdx.x", 1)
    return ir.Kernel("k", (1, 1, 1), (1, 1, 1), [s], ir.seq([total, loop] if reduced else [loop]))


def test_a_loop_that_writes_the_statistic_or_waits_keeps_its_reads():
    s = ir.Buffer("s", (1,), "float32", "shared")
    hoisted = hoist_row_scalars(scalar_loop(s, []))
    assert [b.name for b in hoisted.allocs] == ["s", "s_inv"]
    assert all(n.buffer is not s for n in loop_reads(hoisted.body))
    kernels = [
        scalar_loop(s, [extra])
        for extra in (ir.Store(s, int32(0), Const(2.0, "float32")), ir.Barrier())
    ]
    for kernel in [*kernels, scalar_loop(s, [], reduced=False)]:  # (no statistics: as it is)
        kept = hoist_row_scalars(kernel)
        assert kept.allocs == [s] and any(n.buffer is s for n in loop_reads(kept.body))
