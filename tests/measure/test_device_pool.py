"""CPU tests of the multi-GPU runner pool: fake runners (Python objects) for dispatch and the
model check, and real `LocalRunner`s over the fake `pycuda` driver (two "devices") for a worker
process that dies mid-batch."""

from __future__ import annotations

import threading
import time

import pytest

from measure import (
    BuildResult,
    DeviceMismatchError,
    GPUUnavailableError,
    KernelArtifact,
    Launch,
    LocalMeasureContext,
    LocalRunner,
    MeasureErrorKind,
    RunnerPool,
    RunResult,
    local_runner,
)
from tests.measure.test_measure_fakegpu import (
    FAKE_DRIVER,
    add_reference,
    candidate,
    install_fake_pycuda,
)

# The fake driver, plus a kernel that kills its worker process the first time it runs (a marker
# file remembers that it did): a lost worker, not a CUDA error.
DIE_ONCE_DRIVER = (
    FAKE_DRIVER
    + r"""
import os
_plain_launch = _Function._launch_kernel
def _launch(self, grid, block, params, shared, stream):
    if self.behaviour.startswith(b"die-once:"):
        marker = self.behaviour[len(b"die-once:"):].decode()
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(9)
        self.behaviour = b"add"
    return _plain_launch(self, grid, block, params, shared, stream)
_Function._launch_kernel = _launch
"""
)


class FakeRunner:
    """A runner without a process: `delay` seconds per candidate; a cubin in `die_on` makes it
    report a lost worker once (then it restarts, as LocalRunner does at its next candidate)."""

    def __init__(self, name: str = "FakeGPU (sm_90)", delay: float = 0.01, die_on=()):
        self.name, self.delay, self.die_on = name, delay, set(die_on)
        self.device_name: str | None = None
        self.worker_starts = 0
        self.alive = False
        self.ran: list[bytes] = []
        self.busy = 0
        self.most_busy = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        if not self.alive:
            self.alive, self.device_name = True, self.name
            self.worker_starts += 1

    def run(self, artifacts, builds, references, cost_bound=None):
        self.start()
        with self._lock:
            self.busy += 1
            self.most_busy = max(self.most_busy, self.busy)
        try:
            out = []
            for build in builds:
                time.sleep(self.delay)
                if build.cubin in self.die_on:
                    self.die_on.discard(build.cubin)
                    self.alive = False
                    out.append(RunResult((), MeasureErrorKind.RUNTIME_ERROR, "died", 0.0, True))
                    continue
                self.ran.append(build.cubin)
                out.append(RunResult((self.delay,), run_seconds=self.delay))
            return out
        finally:
            with self._lock:
                self.busy -= 1

    def close(self) -> None:
        self.alive = False


def fake_candidates(n: int):
    art = KernelArtifact("// fake", (Launch("k", (1,), (32,)),), (), None)
    return [art] * n, [BuildResult(f"k{i}".encode(), {}) for i in range(n)]


def test_candidates_go_to_whichever_runner_is_free():
    slow, fast = FakeRunner(delay=0.05), FakeRunner(delay=0.005)
    arts, builds = fake_candidates(24)
    with RunnerPool([slow, fast]) as pool:
        results = pool.run(arts, builds)
    assert all(r.error_kind == MeasureErrorKind.NO_ERROR for r in results)
    assert sorted(slow.ran + fast.ran) == sorted(b.cubin for b in builds)
    assert len(fast.ran) > 2 * len(slow.ran) > 0  # the free one takes the next candidate
    assert slow.most_busy == fast.most_busy == 1  # one candidate per runner at a time
    assert pool.per_runner == [len(slow.ran), len(fast.ran)]
    assert pool.device_name == "2 x FakeGPU (sm_90)"


def test_a_lost_candidate_is_retried_once_on_another_runner():
    # every runner dies on k0 once; the first free runner (the first) takes it first
    dying, other = FakeRunner(die_on={b"k0"}), FakeRunner(die_on={b"k0"})
    arts, builds = fake_candidates(8)
    with RunnerPool([dying, other]) as pool:
        results = pool.run(arts, builds)
    assert all(r.error_kind == MeasureErrorKind.NO_ERROR for r in results[1:])
    if results[0].error_kind == MeasureErrorKind.NO_ERROR:  # retried on the other: done
        assert pool.retries == 1 and (b"k0" in dying.ran) != (b"k0" in other.ran)
    else:  # each runner lost it once: retried once, then given up
        assert pool.retries == 1 and "retried on runner" in results[0].error_msg
    assert dying.worker_starts == 2  # restarted for its next candidate


def test_devices_of_different_models_are_refused():
    pool = RunnerPool([FakeRunner("NVIDIA H100 (sm_90)"), FakeRunner("NVIDIA A100 (sm_80)")])
    with pytest.raises(DeviceMismatchError, match="different models.*H100.*A100"):
        pool.submit(*[x[0] for x in fake_candidates(1)])
    RunnerPool([FakeRunner("A"), FakeRunner("B")], check_models=False).start()


def test_one_device_is_a_plain_runner_and_devices_are_checked(fake_pycuda):
    assert isinstance(local_runner([0]), LocalRunner)
    assert isinstance(local_runner([0, 1]), RunnerPool)
    with pytest.raises(ValueError, match="twice"):
        RunnerPool.for_devices([1, 1])
    with pytest.raises(ValueError, match="empty"):
        local_runner([])


@pytest.fixture()
def fake_pycuda(tmp_path, monkeypatch):
    """A fake `pycuda` (the runner tests' driver and the die-once kernel) first on the path of
    this process and of the workers."""
    yield from install_fake_pycuda(tmp_path, monkeypatch, DIE_ONCE_DRIVER)


def test_a_worker_killed_mid_batch_is_restarted_and_its_candidate_retried(fake_pycuda, tmp_path):
    refs = {"add": add_reference()}
    marker = tmp_path / "died"
    names = ["add", "add", f"die-once:{marker}", "add", "add", "add"]
    arts, builds = zip(*(candidate(n) for n in names), strict=True)
    with RunnerPool.for_devices([0, 1], number=1, repeat=1, min_repeat_ms=0.0) as pool:
        results = pool.run(arts, builds, refs)
        assert [r.error_kind for r in results] == [MeasureErrorKind.NO_ERROR] * 6, [
            r.error_msg for r in results
        ]
        assert marker.exists() and pool.retries == 1
        again = pool.time_on_each(*candidate("add"), refs)  # both runners work again
        assert [r.error_kind for r in again] == [MeasureErrorKind.NO_ERROR] * 2
        assert pool.worker_starts == 3  # two, and the one restarted


class FakeBuilder:
    """Builds instantly, in reverse order; odd candidates fail to compile."""

    def build_as_completed(self, artifacts):
        for i in reversed(range(len(artifacts))):
            if i % 2:
                yield i, BuildResult(None, {}, MeasureErrorKind.COMPILE_ERROR, "no")
            else:
                yield i, BuildResult(f"k{i}".encode(), {}, finished_at=time.perf_counter())

    def close(self) -> None:
        pass


def test_the_measure_context_runs_built_candidates_on_every_runner():
    runners = [FakeRunner(delay=0.02), FakeRunner(delay=0.02)]
    arts, _ = fake_candidates(10)
    with LocalMeasureContext(FakeBuilder(), RunnerPool(runners)) as context:
        results = context.measure_batch(arts)
        kinds = [r.error_kind for r in results]
        assert kinds == [MeasureErrorKind.NO_ERROR, MeasureErrorKind.COMPILE_ERROR] * 5
        assert all(r.costs == (0.02,) for r in results[::2])
        assert sorted(e.index for e in context.timeline) == list(range(10))
        assert [e.run_end is None for e in sorted(context.timeline, key=lambda e: e.index)] == [
            False,
            True,
        ] * 5
    assert runners[0].ran and runners[1].ran


def test_the_cli_takes_a_device_list_or_a_scheduler():
    from autosched.cli.app import build_parser
    from autosched.errors import AutoschedError

    parser = build_parser()
    ns = parser.parse_args(["tune", "matmul", "--devices", "0,1"])
    assert ns.devices == [0, 1] and ns.scheduler is None
    ns = parser.parse_args(["tune-model", "m:f", "--scheduler", "tcp://h:8786"])
    assert ns.scheduler == "tcp://h:8786" and ns.devices is None and ns.parallel_tasks is None
    for bad, why in (
        (["--devices", "0,0"], "distinct device indices"),
        (["--devices", "x"], "not a list of device indices"),
        (["--devices", "0", "--scheduler", "a"], "not allowed with"),
        (["--min-repeat-ms", "0"], "not a positive number of milliseconds"),
        (["--min-repeat-ms", "fast"], "not a number of milliseconds"),
    ):
        with pytest.raises(AutoschedError, match=why):
            parser.parse_args(["tune", "matmul", *bad])


def test_the_cli_sets_the_runners_shortest_repeat_where_asked():
    from autosched.cli.app import build_parser
    from autosched.cli.devices import runner_options

    parser = build_parser()
    assert runner_options(parser.parse_args(["tune", "matmul"])) == {}
    for command in (["tune", "matmul"], ["tune-model", "m:f"]):
        ns = parser.parse_args([*command, "--min-repeat-ms", "2"])
        assert runner_options(ns) == {"min_repeat_ms": 2.0}


class LostRunner(FakeRunner):
    """A runner whose GPU cannot be used any more (its device fell off the bus)."""

    def run(self, artifacts, builds, references, cost_bound=None):
        raise GPUUnavailableError("device 1 is gone")


def test_a_lost_runner_leaves_the_rotation_and_time_on_each_says_so():
    good, lost = FakeRunner(), LostRunner()
    arts, builds = fake_candidates(4)
    with RunnerPool([lost, good]) as pool:
        results = pool.run(arts, builds)  # the lost runner takes one, then leaves
        assert all(r.error_kind == MeasureErrorKind.NO_ERROR for r in results)
        assert sorted(good.ran) == sorted(b.cubin for b in builds)
        done: list = []

        def each() -> None:
            try:
                done.append(pool.time_on_each(arts[0], builds[0]))
            except GPUUnavailableError as exc:
                done.append(exc)

        thread = threading.Thread(target=each, daemon=True)
        thread.start()
        thread.join(5)
        assert done, "time_on_each hung on a lost runner"
        assert isinstance(done[0], GPUUnavailableError) and "runner 0" in str(done[0])


class SlowFirstBuilder(FakeBuilder):
    """Builds every candidate at once; none fails."""

    def build_as_completed(self, artifacts):
        for i in range(len(artifacts)):
            yield i, BuildResult(f"k{i}".encode(), {}, finished_at=time.perf_counter())


def test_a_candidates_run_starts_when_a_runner_takes_it_not_when_it_is_queued():
    arts, _ = fake_candidates(3)
    with LocalMeasureContext(SlowFirstBuilder(), RunnerPool([FakeRunner(delay=0.05)])) as context:
        context.measure_batch(arts)
    events = sorted(context.timeline, key=lambda e: e.run_start)
    for before, after in zip(events, events[1:], strict=False):
        assert after.run_start >= before.run_end - 1e-3  # it waited for the one runner
        assert after.run_end - after.run_start == pytest.approx(0.05, abs=0.03)


def test_the_cli_takes_an_early_stop_factor_or_0_for_off():
    from autosched.cli.app import build_parser
    from autosched.errors import AutoschedError
    from autosched.search.program_measurer import EARLY_STOP_FACTOR

    parser = build_parser()
    assert parser.parse_args(["tune", "matmul"]).early_stop == EARLY_STOP_FACTOR
    assert parser.parse_args(["tune", "matmul", "--early-stop", "2"]).early_stop == 2.0
    assert parser.parse_args(["tune-model", "m:f", "--early-stop", "0"]).early_stop is None
    for bad, why in (("0.5", "neither 0 .off. nor a factor >= 1"), ("x", "not a number")):
        with pytest.raises(AutoschedError, match=why):
            parser.parse_args(["tune", "matmul", "--early-stop", bad])
