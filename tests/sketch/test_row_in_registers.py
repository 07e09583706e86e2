"""A normalisation's row (or a cluster block's part of it) kept in registers: the third sketch
of RowInSharedMemory and of RowOverCluster (sketch/row_in_shared.py, sketch/row_cluster.py), a
local cache of the input at the row loop whose threads each keep the elements they load
(a thread-private cache, lower/thread_private.py), read 16 bytes at a time where the row is cut
in vectors. The sampled kernels compute the DAG on the interpreter, replay from their steps,
print as a Python schedule, and at the benchmark's sizes compile for sm_90 with the cache in
registers (no spills, no stack frame), a softmax over a cluster with its one (max, sum)
exchange."""

from __future__ import annotations

import dataclasses

import pytest

from autosched.codegen.build import build
from autosched.codegen.cuda import codegen_program
from autosched.schedule.steps import print_python_schedule, replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.fast_exp import fast_exp_candidates
from autosched.sketch.launch_bounds import launch_shape, row_register_elems
from autosched.sketch.online_exchange import online_candidates
from autosched.sketch.params import SketchParams
from autosched.sketch.plan import make_plan
from benchmarks.memory_bound import task_of
from measure import compile_resources
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.interpreter_check import interpret_and_compare
from tests.sketch.test_row_cluster import DAGS, cluster_sizes
from tests.sketch.test_row_in_shared import softmax

WHOLE_ROWS = SketchParams(row_cluster_sizes=())
CLUSTERS = SketchParams(row_cluster_sizes=(2, 4))


def in_registers(sketches) -> list:
    """The sketches that keep their rows in a local cache."""
    return [s for s in sketches if any(st.name == "x.local" for st in s.stages)]


@pytest.mark.parametrize("clusters", [False, True], ids=["whole_rows", "clusters"])
@pytest.mark.parametrize("name", list(DAGS))
def test_rows_kept_in_registers_compute_the_dag(name, clusters):
    dag = DAGS[name]()
    params = CLUSTERS if clusters else WHOLE_ROWS
    sketches = [s for s in in_registers(generate_sketches(dag, params=params))]
    sketches = [s for s in sketches if bool(cluster_sizes(s)) == clusters]
    assert sketches
    sampler = SketchSampler(sketches, params=params)
    states = sampler.sample(2, 0)
    assert states, sampler.rejected
    for state in states:
        kernel = build(dag, state)
        (k,) = kernel.program.kernels
        (cache,) = [b for b in k.allocs if b.name == "x_local"]
        # a thread's share of its block's part (the cluster's last blocks may get less of the
        # row when its parts do not divide among them, which LaunchBounds' estimate assumes)
        assert cache.thread_private and cache.size * k.block[0] * k.cluster >= 2048
        assert 0 < row_register_elems(state, len(state.stages) - 1) <= cache.size
        interpret_and_compare(dag, kernel.program, rtol=1e-4)
        assert 's.cache_read(x, "local"' in print_python_schedule(state)
        assert replay(dag, state.steps) == state


def test_rows_that_do_not_divide_among_the_threads():
    dag = softmax(3, 1009)
    sampler = SketchSampler(in_registers(generate_sketches(dag, params=WHOLE_ROWS)))
    states = sampler.sample(3, 0)
    assert states, sampler.rejected
    for state in states:
        (kernel,) = sampler.programs[state.key()].kernels
        (cache,) = [b for b in kernel.allocs if b.name == "x_local"]
        assert cache.size * kernel.block[0] > 1009  # the last threads' slots past the row
        interpret_and_compare(dag, sampler.programs[state.key()], rtol=1e-4)


def test_rows_too_long_for_registers_are_not_kept_there():
    few_threads = HardwareParams(max_threads_per_block=64)  # 2048 / 64 = 32 a thread: fits
    assert in_registers(generate_sketches(softmax(4, 2048), few_threads, WHOLE_ROWS))
    assert not in_registers(generate_sketches(softmax(4, 4096), few_threads, WHOLE_ROWS))
    off = SketchParams(row_cluster_sizes=(), max_row_register_elems=0)
    assert not in_registers(generate_sketches(softmax(4, 2048), params=off))


@needs_nvcc
@pytest.mark.parametrize(
    "workload", ["softmax_256x32768", "layer_norm_128x65536", "rms_norm_16x262144"]
)
def test_rows_in_registers_compile_without_local_memory(workload):
    task = task_of(workload)
    params = SketchParams.for_task(task)
    sketches = in_registers(generate_sketches(task.compute_dag, params=params))
    sampler = SketchSampler(sketches, params=params)
    states = sampler.sample(2, 0)
    assert states, sampler.rejected
    for k, state in enumerate(states):
        for i in online_candidates(state):  # a softmax over a cluster: one (max, sum) exchange
            state = state.pragma(i, 0, "online_exchange", 1)
        if k == 1:  # the study kernel's form: streaming loads and stores, fast exponentials
            root = len(state.stages) - 1
            for pragma in ("stream_reads", "stream_writes"):
                state = state.pragma(root, 0, pragma, 1)
            for i in fast_exp_candidates(state):
                state = state.pragma(i, 0, "fast_exp", 1)
        source = build(task.compute_dag, state).source
        assert k != 1 or "__stcs(" in source
        (res,) = compile_resources(source, arch="sm_90").values()
        assert res.spill_bytes == 0 and res.stack_bytes == 0, source


def test_the_thread_count_is_drawn_where_a_threads_share_fits():
    """RMSNorm 16 x 262,144 over portable clusters of 8: 32,768 floats a block fit 32 registers
    a thread at 1,024 threads only, so that is the thread count its register sketches draw."""
    task = task_of("rms_norm_16x262144")
    params = dataclasses.replace(SketchParams.for_task(task), row_cluster_sizes=(2, 4, 8))
    sketches = in_registers(generate_sketches(task.compute_dag, params=params))
    plans = [make_plan(s, params, HardwareParams()) for s in sketches]
    assert plans and all(set(p.min_threads.values()) == {1024} for p in plans)
    sampler = SketchSampler(sketches, params=params, verify=False)
    for state in sampler.sample(3, 0):
        assert launch_shape(state, len(state.stages) - 1)[1] == 1024


def test_rows_kept_in_registers_may_be_streamed():
    """Each register-resident sketch has a twin whose kernel reads the row with `__ldcs` and
    stores the output with `__stcs`; its states compute the softmax on the interpreter and
    replay."""
    dag = softmax(4, 1024)
    sketches = in_registers(generate_sketches(dag, params=CLUSTERS))
    streamed = [s for s in sketches if any(st.stream_reads for st in s.stages)]
    assert streamed and 2 * len(streamed) == len(sketches)
    sampler = SketchSampler(streamed, params=CLUSTERS)
    states = sampler.sample(2, 0)
    assert states, sampler.rejected
    for state in states:
        program = sampler.programs[state.key()]
        source = codegen_program(program)
        assert "__ldcs(" in source and "__ldcs(&T_softmax_norm" not in source, source
        assert "__stcs(reinterpret_cast<float4*>(&T_softmax_norm[" in source, source
        assert "__stcs(&x" not in source, source
        interpret_and_compare(dag, program, rtol=1e-4)
        assert replay(dag, state.steps) == state
    off = dataclasses.replace(CLUSTERS, stream_reads=False)
    assert len(in_registers(generate_sketches(dag, params=off))) == len(streamed)


def test_rows_that_divide_into_vectors_are_kept_by_threads_owning_vectors():
    """Where the row divides into 16-byte vectors, only the sketches whose threads each own
    vectors keep it in registers (the cache loads a float4 a time); a row that does not still
    gets its register sketches."""
    for length, vectors in ((1024, True), (1009, False)):
        sketches = in_registers(generate_sketches(softmax(4, length), params=CLUSTERS))
        assert sketches
        caches = [s["x.local"] for s in sketches]
        loads = {any(it.annotation == "vectorize" for it in c.iters) for c in caches}
        assert loads == ({True} if vectors else {True, False})


@pytest.mark.parametrize(
    ("name", "operands"),
    [("layer_norm", {"gamma", "beta"}), ("rms_norm", {"w"}), ("softmax", set())],
)
def test_a_rows_operands_are_kept_in_registers_beside_it(name, operands):
    """A cluster's register sketch comes with a twin that also caches the row's operands (a
    layer norm's gamma and beta, an RMSNorm's weight) in registers, loaded with the row before
    the reduction: nothing is read from global memory after the cluster exchange."""
    dag = DAGS[name]()
    sketches = [s for s in in_registers(generate_sketches(dag, params=CLUSTERS))]
    names = {f"{o}.local" for o in operands}
    cached = [s for s in sketches if names & {st.name for st in s.stages}]
    assert bool(cached) == bool(operands)
    if not operands:
        return
    assert all(names <= {st.name for st in s.stages} for s in cached)
    (state,) = SketchSampler(cached, params=CLUSTERS).sample(1, 0)
    kernel = build(dag, state)
    (k,) = kernel.program.kernels
    kept = {b.name for b in k.allocs if b.thread_private}
    assert kept == {"x_local"} | {f"{o}_local" for o in operands}
    after_exchange = kernel.source.split("as_cluster_sync();", 1)[1]
    assert all(f"&{o}[" not in after_exchange for o in operands)
    interpret_and_compare(dag, kernel.program, rtol=1e-4)


def test_a_row_and_its_operands_share_a_threads_registers():
    """The thread count drawn for a row part of 1,024 floats over a cluster of 2: at least 32
    threads alone (32 floats each), at least 96 with gamma's and beta's parts beside it."""
    params = SketchParams(row_cluster_sizes=(2,))
    sketches = [s for s in in_registers(generate_sketches(DAGS["layer_norm"](), params=params))]
    sketches = [s for s in sketches if cluster_sizes(s)]
    with_operands = [s for s in sketches if any(st.name == "gamma.local" for st in s.stages)]
    alone = [s for s in sketches if s not in with_operands]

    def fewest(states) -> set[int]:
        return {
            t for s in states for t in make_plan(s, params, HardwareParams()).min_threads.values()
        }

    assert fewest(alone) == {32} and fewest(with_operands) == {96}


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize(
    ("workload", "cluster"), [("layer_norm_128x65536", 8), ("rms_norm_16x262144", 16)]
)
def test_full_size_operands_in_registers_compile_without_spills(workload, cluster):
    """The register states that keep the row's operands too, at full size (the RMSNorm over
    clusters of 16): sm_90 code without spills or a stack frame."""
    task = task_of(workload)
    params = dataclasses.replace(SketchParams.for_task(task), row_cluster_sizes=(cluster,))
    sketches = generate_sketches(task.compute_dag, params=params)
    sketches = [s for s in sketches if sum(st.name.endswith(".local") for st in s.stages) > 1]
    assert sketches
    for state in SketchSampler(sketches, params=params).sample(2, 0):
        kernel = build(task.compute_dag, state)
        assert kernel.launches[0].cluster_blocks == cluster
        (res,) = compile_resources(kernel.source, arch="sm_90").values()
        assert res.spill_bytes == 0 and res.stack_bytes == 0, kernel.source
