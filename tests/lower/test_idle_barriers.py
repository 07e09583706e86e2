"""Barriers that order nothing (lower/idle_barriers.py): the device program of a row kept in
registers starts its reduction without a barrier after the row's loads, and still computes the
DAG on the interpreter; a first barrier after a shared store, a local store that reads shared
memory, or a read of a global buffer the kernel writes stays. A block reduction in no loop
waits once (its scratch is never written again), one in a loop twice."""

from __future__ import annotations

import pytest

from autosched.codegen.build import build
from autosched.codegen.cuda import codegen_program
from autosched.lower import ir
from autosched.lower.idle_barriers import drop_idle_barrier, mark_single_allreduces
from autosched.lower.ir import int32
from autosched.sketch import SketchSampler, generate_sketches
from autosched.te.expr import Const, Load, Var
from tests.interpreter_check import interpret_and_compare
from tests.lower.test_interpreter import rowsum_cond_program
from tests.sketch.test_row_cluster import CLUSTERS, DAGS
from tests.sketch.test_row_in_registers import in_registers

X = ir.Buffer("x", (4,), "float32")
Y = ir.Buffer("y", (4,), "float32")
PART = ir.Buffer("part", (4,), "float32", "local")
STAT = ir.Buffer("stat", (1,), "float32", "shared")


def kernel_with(first: list[ir.Stmt]) -> ir.Kernel:
    """`first`, a barrier, then the statistic in shared memory and the output it scales."""
    i = Var("i")
    stat = ir.seq([ir.Store(STAT, int32(0), Load(PART, (int32(0),))), ir.Barrier()])
    out = ir.For(i, 4, "serial", ir.Store(Y, i, Load(STAT, (int32(0),))))
    body = ir.seq([*first, ir.Barrier(), stat, out])
    return ir.Kernel("k", (1, 1, 1), (1, 1, 1), [PART, STAT], body)


def barriers(kernel: ir.Kernel) -> int:
    return sum(isinstance(s, ir.Barrier) for s in ir.iter_stmts(kernel.body))


def test_a_barrier_after_loads_into_registers_is_dropped():
    i = Var("i")
    fill = ir.For(i, 4, "unroll", ir.Store(PART, i, Load(X, (i,))))
    assert barriers(drop_idle_barrier(kernel_with([fill]))) == 1  # the one its readers wait at


@pytest.mark.parametrize(
    "first",
    [
        ir.Store(STAT, int32(0), Const(0.0, "float32")),  # a shared store
        ir.Store(PART, int32(0), Load(STAT, (int32(0),))),  # a read of shared memory
        ir.Store(PART, int32(0), Load(Y, (int32(0),))),  # a read of what the kernel writes
        ir.Store(Y, int32(0), Const(0.0, "float32")),  # a global store
    ],
    ids=["shared_store", "shared_read", "written_global_read", "global_store"],
)
def test_a_barrier_that_orders_something_stays(first):
    assert barriers(drop_idle_barrier(kernel_with([first]))) == 2


def test_rows_in_registers_reduce_without_waiting_for_the_block():
    dag = DAGS["rms_norm"]()
    sketches = [s for s in in_registers(generate_sketches(dag, params=CLUSTERS))]
    (state,) = SketchSampler(sketches, params=CLUSTERS).sample(1, 0)
    kernel = build(dag, state)
    (k,) = kernel.program.kernels
    first = next(s for s in k.body.stmts if not isinstance(s, ir.For))
    assert not isinstance(first, ir.Barrier)
    assert "}\n  __syncthreads();" not in kernel.source.split("_part[0] = ")[0]
    interpret_and_compare(dag, kernel.program, rtol=1e-4)


def test_a_block_reduction_run_once_waits_once_after_its_scratch():
    program = rowsum_cond_program(4, 100, 128, 1)  # 128 threads: through shared memory
    (k,) = program.kernels
    looped = ir.Kernel(k.name, k.grid, k.block, k.allocs, ir.For(Var("t"), 2, "serial", k.body))

    def waits(kernel: ir.Kernel) -> int:
        marked = mark_single_allreduces(kernel)
        source = codegen_program(ir.Program([marked], program.params, program.outputs))
        return source.count("__syncthreads();")

    assert (waits(k), waits(looped)) == (1, 2)
    (marked,) = [
        s for s in ir.iter_stmts(mark_single_allreduces(k).body) if isinstance(s, ir.AllReduce)
    ]
    assert marked.once
