"""Thread-private caches (lower/thread_private.py): a local cache computed at a block's row
loop whose own iterators are bound to threadIdx keeps, in each thread, only the elements that
thread loads; its readers must read only their own thread's elements, or lowering refuses the
state."""

from __future__ import annotations

import pytest

from autosched import te
from autosched.errors import LoweringError
from autosched.lower.lowering import lower
from autosched.schedule.compute_dag import ComputeDAG
from tests.interpreter_check import interpret_and_compare


def doubled_rows(m: int, n: int) -> ComputeDAG:
    x = te.placeholder((m, n), name="x")
    return ComputeDAG([x, te.compute((m, n), lambda i, j: x[i, j] * 2.0, name="y")])


def row_cached(dag: ComputeDAG, threads: int, cache_thread_part: str):
    """y's rows on blocks, each row cut [rest, threads] with the threads on threadIdx.x; a
    local cache of x at the row loop cut the same way with part `cache_thread_part` ("i":
    the inner one, as y; "o": the outer one) on threadIdx.x."""
    state = dag.get_init_state()
    state = state.cache_read("x", "local", ["y"])
    state = state.split("y", "j", [threads]).bind("y", "j_i", "threadIdx.x")
    state = state.bind("y", "i", "blockIdx.x")
    state = state.compute_at("x.local", "y", "i")
    state = state.split("x.local", "ax1", [threads])
    return state.bind("x.local", f"ax1_{cache_thread_part}", "threadIdx.x")


def test_each_thread_keeps_the_elements_it_loads():
    dag = doubled_rows(2, 200)  # rows of 200 over 64 threads: the last part is guarded
    program = lower(row_cached(dag, 64, "i"), verify=True)
    (kernel,) = program.kernels
    (cache,) = [b for b in kernel.allocs if b.name == "x_local"]
    assert cache.scope == "local" and cache.thread_private and cache.shape == (4,)
    interpret_and_compare(dag, program)


def test_a_reader_of_another_threads_elements_is_refused():
    with pytest.raises(LoweringError, match="reads thread-private cache 'x.local' at elements"):
        lower(row_cached(doubled_rows(2, 256), 64, "o"))
