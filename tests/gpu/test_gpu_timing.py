"""GPU time without host launch cost, on the GPU: the search's runner (measure/_worker.py) and the
benchmarks' method (benchmarks.timing.time_graph) both replay CUDA graphs, and agree.

Every test is marked `gpu` (tests/conftest.py skips them where pycuda sees no device); the
agreement tests also need PyTorch with CUDA. Run them with

    python -m pytest -q -m gpu tests/gpu/test_gpu_timing.py
"""

from __future__ import annotations

import statistics

import pytest

import autosched
from autosched.search.policy import SearchParams, SketchPolicy
from autosched.search.program_measurer import task_reference
from autosched.task.search_task import suite_task
from autosched.task.workloads import SUITE
from measure import LocalBuilder, LocalMeasureContext, LocalRunner

pytestmark = pytest.mark.gpu

TRIALS = 16  # per workload: a short search, for a best record to re-time
AGREEMENT = 0.03  # relative difference allowed between the record and the benchmark's time
# ... or this much, whichever is larger: kernels of 1-2 µs (dense_bias at batch 1) are resolved
# to a few tens of nanoseconds by graph replay, where 3% is under the timing's own jitter
RESOLUTION_S = 0.1e-6
# The mean benchmark-minus-record offset allowed over a few two-kernel programs (plus 0.5% for
# timing noise): half of the 0.7 µs by which the two launch states differ for them.
SPLIT_OFFSET_S = 0.35e-6
# A candidate stopped early (its probe's reading) against its full timing: run-to-run noise
# between two timings of one kernel, with room for the probe's shorter reading.
STOPPED_AGREEMENT = 0.05


def _params(seed: int = 0) -> SearchParams:
    return SearchParams(
        population=32, generations=1, sample_init_min_population=TRIALS, n_jobs=1, seed=seed
    )


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def test_graph_time_of_a_small_kernel_is_at_most_its_back_to_back_time():
    """A 1x784 -> 128 dense (a few microseconds): the runner's graph-replay cost is positive and
    no larger than its back-to-back cost (which adds the host's launch rate), and the graph
    path was really taken."""
    task = suite_task("dense_bias")
    policy = SketchPolicy(task, autosched.RandomModel(), _params(), verbose=0)
    states = policy.search_one_round(4)
    assert states, "no valid dense_bias state sampled"
    kernels = [autosched.build(task.compute_dag, s) for s in states]
    ref = task_reference(task, kernels[0].args)
    artifacts = [k.artifact(reference_id="ref", tag=str(i)) for i, k in enumerate(kernels)]
    costs = {}
    for graphs in (True, False):
        runner = LocalRunner(repeat=5, graphs=graphs)
        with LocalMeasureContext(LocalBuilder(timeout=60.0), runner) as ctx:
            results = ctx.measure_batch(artifacts, {"ref": ref})
        ok = [r for r in results if r.error_kind.name == "NO_ERROR"]
        assert ok, [r.error_msg for r in results]
        assert runner.back_to_back_timings == (0 if graphs else len(ok))
        costs[graphs] = [statistics.median(r.costs) if r.costs else None for r in results]
    pairs = [(g, e) for g, e in zip(costs[True], costs[False], strict=True) if g and e]
    assert pairs, "no candidate was timed both ways"
    for graph, eager in pairs:
        assert 0 < graph <= eager * 1.05, (graph * 1e6, eager * 1e6)


def test_worker_time_does_not_move_once_the_process_launches_on_side_streams():
    """The runner's worker settles its context before every timing (measure.launch_state),
    so a small kernel's graph time, read by a worker in this process, is the same before and
    after this process has launched kernels on a side stream; unsettled, each kernel of a replay
    takes about a third of a microsecond more after them. Placed before the benchmark tests of
    this file, which settle this process themselves (timing.settle_launch_state)."""
    torch = _torch()
    import pycuda.driver as drv

    from autosched.codegen.gpu_call import _context
    from measure import compile_kernel, device_arch
    from measure._worker import Worker
    from measure.cuda_graph import load_graph_driver

    task = suite_task("dense_bias")
    policy = SketchPolicy(task, autosched.RandomModel(), _params(), verbose=0)
    states = policy.search_one_round(1)
    assert states, "no valid dense_bias state sampled"
    kernel = autosched.build(task.compute_dag, states[0])
    torch.zeros(1, device="cuda")
    _context()
    _, message, cubin, _ = compile_kernel(kernel.source, device_arch() or "sm_90")
    assert cubin is not None, message
    request = LocalRunner()._request(kernel.artifact(), cubin, None)
    worker = Worker(drv, drv.Context.get_device(), load_graph_driver())

    def reading() -> float:
        reply = worker.handle(request)
        assert reply["timing"] == "graph", reply
        return statistics.median(reply["costs"])

    before = statistics.median(reading() for _ in range(5))
    side, x = torch.cuda.Stream(), torch.zeros(1, device="cuda")
    with torch.cuda.stream(side):
        for _ in range(64):
            x.add_(1.0)
    side.synchronize()
    after = statistics.median(reading() for _ in range(5))
    print(
        f"dense_bias state: worker {before * 1e6:.2f} us, after side-stream launches "
        f"{after * 1e6:.2f} us"
    )
    assert abs(after - before) <= max(0.01 * before, RESOLUTION_S), (before * 1e6, after * 1e6)


def test_a_candidate_stopped_at_its_bound_reads_what_its_full_timing_reads():
    """Eight sampled conv2d_bias_relu states timed in full, then again with a cost bound of 1.5
    times the fastest: those over it stop early (with the probe's reading, one cost) and that
    reading is within STOPPED_AGREEMENT of their full timing; the others get every repeat."""
    task = suite_task("conv2d_bias_relu")
    policy = SketchPolicy(task, autosched.RandomModel(), _params(), verbose=0)
    states = policy.search_one_round(8)
    kernels = [autosched.build(task.compute_dag, s) for s in states]
    ref = task_reference(task, kernels[0].args)
    artifacts = [k.artifact(reference_id="ref", tag=str(i)) for i, k in enumerate(kernels)]
    runner = LocalRunner()
    with LocalMeasureContext(LocalBuilder(timeout=60.0), runner) as ctx:
        full = ctx.measure_batch(artifacts, {"ref": ref})
        ok = [i for i, r in enumerate(full) if r.error_kind.name == "NO_ERROR"]
        assert len(ok) >= 2, [r.error_msg for r in full]
        bound = 1.5 * min(full[i].mean_cost for i in ok)
        bounded = ctx.measure_batch(artifacts, {"ref": ref}, cost_bound=bound)
    stopped = [i for i in ok if bounded[i].stopped_early]
    assert stopped, "no state was slower than 1.5 times the fastest"
    assert all(bounded[i].mean_cost > bound for i in stopped)
    assert runner.early_stops == len(stopped)
    for i in ok:
        if i in stopped:
            line = f"state {i}: stopped {bounded[i].mean_cost * 1e6:.2f} us"
            line += f", full {full[i].mean_cost * 1e6:.2f} us"
            print(line)
            assert len(bounded[i].costs) < len(full[i].costs), line
            assert abs(bounded[i].mean_cost / full[i].mean_cost - 1) <= STOPPED_AGREEMENT, line
        else:
            assert len(bounded[i].costs) == len(full[i].costs)


@pytest.mark.parametrize("name", list(SUITE))
def test_benchmark_graph_time_agrees_with_the_search_record(name, tmp_path):
    """A short search's best record, rebuilt and re-timed in this process the way the
    benchmarks time it (timing.time_graph over launchers of rotated buffer sets, as many
    as the runner cycles through), agrees with the cost the runner recorded."""
    _torch()
    from benchmarks.agreement import best_of, runner_reading, short_search

    task, kernel, recorded = best_of(short_search(name, TRIALS, str(tmp_path)))
    again = runner_reading(task, kernel)  # says which side moved, should the two disagree
    _assert_benchmark_agrees(name, kernel, recorded, again)


def test_benchmark_agrees_with_the_runner_on_split_k_programs():
    """Programs of two kernels (the four fastest of sixteen sampled split-K states of
    conv2d_bias_relu: partial sums, then the sum of the parts with bias and relu), timed by the
    runner as the search times them and re-timed the benchmarks' way in this process, agree:
    the case where the two used to time in different launch states (measure.launch_state),
    0.7 µs apart."""
    _torch()
    from autosched.sketch import SketchSampler, generate_sketches
    from autosched.sketch.utils import SketchParams

    task = suite_task("conv2d_bias_relu")
    params = SketchParams.for_task(task)
    split = [
        s
        for s in generate_sketches(task.compute_dag, task.hardware_params, params)
        if any(st.op.name.endswith(".rf") for st in s.stages)
    ]
    assert split, "conv2d_bias_relu has no split-K sketch"
    states = SketchSampler(split, params=params).sample(16, 0)
    kernels = [autosched.build(task.compute_dag, s) for s in states]
    assert all(len(k.launches) == 2 for k in kernels), [len(k.launches) for k in kernels]
    ref = task_reference(task, kernels[0].args)
    artifacts = [k.artifact(reference_id="ref", tag=str(i)) for i, k in enumerate(kernels)]
    runner = LocalRunner()
    with LocalMeasureContext(LocalBuilder(timeout=60.0), runner) as ctx:
        results = ctx.measure_batch(artifacts, {"ref": ref})
        timed = sorted(
            (statistics.mean(r.costs), i)
            for i, r in enumerate(results)
            if r.error_kind.name == "NO_ERROR"
        )[:4]  # the fastest: where a fixed offset is the largest share of the time
        assert timed, [r.error_msg for r in results]
        assert runner.back_to_back_timings == 0, "the runner did not time by graph replay"
        offsets = []
        for recorded, i in timed:
            # a state's two readings differ by a few percent now and then (the same kernels,
            # two processes): one that disagrees is timed by the runner once more, and the
            # reading nearer the benchmark's is compared; a systematic offset still fails
            seconds = bench_time(kernels[i])
            if abs(seconds - recorded) > AGREEMENT * recorded:
                (again,) = ctx.measure_batch([artifacts[i]], {"ref": ref})
                recorded = min(
                    (recorded, statistics.mean(again.costs)), key=lambda r: abs(seconds - r)
                )
            _assert_benchmark_agrees(f"split-K state {i}", kernels[i], recorded, seconds=seconds)
            offsets.append(seconds - recorded)
    # the launch-state offset is systematic (the same sign and size for every two-kernel
    # program), so it shows in the mean even where 3% of a slower state would hide it; the
    # relative term is the two processes' timing noise
    allowed = SPLIT_OFFSET_S + 0.005 * statistics.mean(r for r, _ in timed)
    assert abs(statistics.mean(offsets)) <= allowed, [round(o * 1e6, 2) for o in offsets]


def bench_time(kernel) -> float:
    """`kernel`'s seconds as the benchmarks time it (agreement.bench_reading: timing.time_graph
    over launchers of rotated buffer sets, as many as the runner cycles through)."""
    from benchmarks.agreement import bench_reading

    return bench_reading(kernel)


def _assert_benchmark_agrees(
    name: str,
    kernel,
    recorded: float,
    again: float | None = None,
    seconds: float | None = None,
) -> float:
    """`kernel` timed as the benchmarks time it (`bench_time`, or `seconds` where it was) is
    within AGREEMENT (or RESOLUTION_S) of `recorded`, the runner's seconds for it; returns that
    time. `again`, a fresh runner's second reading, is only reported."""
    from benchmarks.timing import kernel_rotation_copies

    seconds = bench_time(kernel) if seconds is None else seconds
    read_again = "" if again is None else f", runner again {again * 1e6:.2f} us"
    line = f"{name}: benchmark {seconds * 1e6:.2f} us, record {recorded * 1e6:.2f} us{read_again}"
    print(f"{line}, {kernel_rotation_copies(kernel)} sets")
    assert abs(seconds - recorded) <= max(AGREEMENT * recorded, RESOLUTION_S), line
    return seconds
