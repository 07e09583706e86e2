"""LocalMeasureContext overlaps building and running: each kernel runs as soon as it is built."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from measure import (
    ArgSpec,
    BuildResult,
    KernelArtifact,
    Launch,
    LocalBuilder,
    MeasureErrorKind,
    RunResult,
)
from measure.context import LocalMeasureContext, MeasureResult

ARGS = (ArgSpec("a", (4,), "float32"), ArgSpec("b", (4,), "float32", is_output=True))


def _artifact(tag: str) -> KernelArtifact:
    return KernelArtifact("", (Launch("k", (1,), (32,)),), ARGS, None, tag)


class ScriptedBuilder:
    """Yields builds in a fixed completion order and logs when each finished."""

    def __init__(self, order, failing=(), log=None):
        self.order, self.failing, self.log = order, set(failing), log

    def build_as_completed(self, artifacts):
        for i in self.order:
            self.log.append(("built", artifacts[i].tag))
            if artifacts[i].tag in self.failing:
                yield (
                    i,
                    BuildResult(
                        None,
                        {},
                        MeasureErrorKind.COMPILE_ERROR,
                        "boom",
                        0.5,
                        finished_at=time.perf_counter(),
                    ),
                )
            else:
                yield (
                    i,
                    BuildResult(b"cubin", {}, build_seconds=0.5, finished_at=time.perf_counter()),
                )


class LoggingRunner:
    """Returns a cost derived from the tag and logs each run."""

    def __init__(self, log):
        self.log = log

    def run(self, artifacts, builds, references, cost_bound=None):
        (art,) = artifacts
        assert builds[0].ok
        self.log.append(("ran", art.tag))
        return [RunResult((float(art.tag[1:]),), run_seconds=0.01)]

    def close(self):
        pass


def test_results_keep_artifact_order_and_runs_start_before_the_batch_is_built():
    log = []
    arts = [_artifact(f"k{i}") for i in range(5)]
    ctx = LocalMeasureContext(
        ScriptedBuilder([3, 0, 4, 1, 2], failing={"k4"}, log=log), LoggingRunner(log)
    )
    results = ctx.measure_batch(arts)
    assert [r.costs for r in results] == [(0.0,), (1.0,), (2.0,), (3.0,), ()]
    assert (
        results[4].error_kind == MeasureErrorKind.COMPILE_ERROR and results[4].build_seconds == 0.5
    )
    # The first built kernel ran before the second one was built; a failed build never ran.
    assert log[:3] == [("built", "k3"), ("ran", "k3"), ("built", "k0")]
    assert ("ran", "k4") not in log
    # the timeline: one event per candidate in completion order, each run after its build
    assert [e.index for e in ctx.timeline] == [3, 0, 4, 1, 2]
    for e in ctx.timeline:
        assert e.build_end - e.build_start == pytest.approx(0.5)
        assert e.build_end <= e.run_start
        assert (e.run_end is None) == (e.index == 4) and (
            e.run_end is None or e.run_start <= e.run_end
        )


def test_build_as_completed_yields_each_index_once_in_completion_order():
    """The costlier artifact starts first, but finishes only once the cheap one has been
    yielded: completion order, not start order (a builder that waited for the first started
    would never yield)."""
    yielded = threading.Event()

    class GatedBuilder(LocalBuilder):
        def build_one(self, artifact):
            if artifact.tag == "slow":
                assert yielded.wait(timeout=60), "the cheap build was not yielded first"
                return BuildResult(b"slow", {})
            return BuildResult(b"fast", {})

    try:
        builder = GatedBuilder(n_parallel=2)
    except Exception as exc:  # no nvcc: nothing to build with
        pytest.skip(str(exc))
    slow = 'extern "C" __global__ void k(float* a, float* b) { b[1] = a[1]; }\n' * 2
    fast = 'extern "C" __global__ void k(float* a, float* b) { b[0] = a[0]; }\n'
    arts = [
        KernelArtifact(src, (Launch("k", (1,), (32,)),), ARGS, None, tag)
        for src, tag in [(slow, "slow"), (fast, "fast")]
    ]
    results = []
    for item in builder.build_as_completed(arts):
        results.append(item)
        yielded.set()
    assert [i for i, _ in results] == [1, 0]
    assert [r.cubin for _, r in results] == [b"fast", b"slow"]


class BoundedRunner:
    """Records the cost bound of each run; a kernel (of cost from its tag) slower than its
    bound stops early."""

    def __init__(self):
        self.bounds = []

    def run(self, artifacts, builds, references, cost_bound=None):
        (art,) = artifacts
        self.bounds.append(cost_bound)
        cost = float(art.tag[1:])
        stopped = cost_bound is not None and cost > cost_bound
        return [RunResult((cost,) if stopped else (cost,) * 3, stopped_early=stopped)]

    def close(self):
        pass


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_cost_bound_reaches_every_runner_and_stopped_early_comes_back(gpus):
    from measure import RunnerPool

    runners = [BoundedRunner() for _ in range(gpus)]
    runner = runners[0] if gpus == 1 else RunnerPool(runners, check_models=False)
    arts = [_artifact(f"k{i}") for i in range(4)]
    ctx = LocalMeasureContext(ScriptedBuilder([0, 1, 2, 3], log=[]), runner)
    with contextlib.closing(runner):
        results = ctx.measure_batch(arts, cost_bound=1.5)
        assert [r.stopped_early for r in results] == [False, False, True, True]
        assert [len(r.costs) for r in results] == [3, 3, 1, 1]
        assert [MeasureResult.from_dict(r.to_dict()) for r in results] == results
        assert sorted(b for r in runners for b in r.bounds) == [1.5] * 4
        ctx.measure_batch(arts)
        assert sum(b is None for r in runners for b in r.bounds) == 4
