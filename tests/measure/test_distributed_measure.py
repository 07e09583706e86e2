"""CPU tests of measuring on a Dask cluster: an in-process LocalCluster of two "GPU" workers
(resource GPU=1) whose measure context is a fake (it sleeps, and notes who measured what when).
Candidates are measured, a worker closed mid-round costs only its in-flight candidates, the
records land in one log on the client, and two tasks of a model are tuned at once."""

from __future__ import annotations

import threading
import time

import pytest

distributed = pytest.importorskip("distributed")

import dask  # noqa: E402

import autosched  # noqa: E402
from autosched.records import RecordToFile, load_records  # noqa: E402
from autosched.search.distributed import (  # noqa: E402
    DaskMeasureContext,
    close_worker_contexts,
)
from autosched.search.policy import SearchParams  # noqa: E402
from autosched.search.program_measurer import ProgramMeasurer  # noqa: E402
from autosched.search.tune_model import PolicyTuner, tune_tasks  # noqa: E402
from measure import (  # noqa: E402
    GPUUnavailableError,
    KernelArtifact,
    Launch,
    MeasureErrorKind,
    MeasureResult,
)

DELAY = 0.03  # seconds per fake candidate
EVENTS: list[tuple[str, str | None, float, float]] = []  # (worker, reference id, start, end)
EVENTS_LOCK = threading.Lock()
BOUNDS: list[float | None] = []  # the cost bound each chunk was measured with


class FakeContext:
    """A worker's measure context without a GPU: `DELAY` seconds per candidate, a cost from
    the source's length, and an event per chunk."""

    def measure_batch(self, artifacts, references=None, cost_bound=None):
        BOUNDS.append(cost_bound)
        worker = distributed.get_worker().address
        start = time.monotonic()
        results = []
        for art in artifacts:
            time.sleep(DELAY)
            cost = 1e-6 * (1 + len(art.source) % 97)
            results.append(MeasureResult((cost, cost), MeasureErrorKind.NO_ERROR, "", 0, DELAY, {}))
        with EVENTS_LOCK:
            EVENTS.append((worker, artifacts[0].reference_id, start, time.monotonic()))
        return results

    def close(self) -> None:
        with EVENTS_LOCK:
            CLOSED.append(self)


CLOSED: list[FakeContext] = []  # the fake contexts closed


def fake_context() -> FakeContext:
    return FakeContext()


def artifacts(n: int):
    return [
        KernelArtifact(f"// kernel {i}" + " " * i, (Launch("k", (1,), (1,)),), ()) for i in range(n)
    ]


@pytest.fixture()
def cluster(request):
    """Two in-process workers with one GPU each (their scheduler's allowed failures from the
    `allowed_failures` parameter, when given)."""
    allowed = getattr(request, "param", 3)
    EVENTS.clear()
    with dask.config.set({"distributed.scheduler.allowed-failures": allowed}):
        cl = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            resources={"GPU": 1},
            dashboard_address=None,
        )
        client = distributed.Client(cl)
    yield cl, client
    client.close()
    cl.close()


def test_a_batch_is_measured_on_every_gpu_worker(cluster):
    cl, client = cluster
    context = DaskMeasureContext(client, context_factory=fake_context, chunk_size=2)
    assert context.gpu_workers() == 2
    BOUNDS.clear()
    results = context.measure_batch(artifacts(12), cost_bound=2e-6)
    assert BOUNDS == [2e-6] * 6  # every chunk carries the batch's cost bound
    assert all(r.error_kind == MeasureErrorKind.NO_ERROR for r in results)
    assert [r.costs[0] for r in results] == [1e-6 * (1 + len(a.source) % 97) for a in artifacts(12)]
    assert len({w for w, *_ in EVENTS}) == 2 and len(EVENTS) == 6


def _close_a_worker_mid_round(cl, client, n: int):
    """Measure `n` candidates in chunks of 4; lose the first worker while it runs a chunk."""
    context = DaskMeasureContext(client, context_factory=fake_context, chunk_size=4, timeout=30)
    got: list = []
    thread = threading.Thread(target=lambda: got.append(context.measure_batch(artifacts(n))))
    thread.start()
    victim = next(iter(cl.workers.values()))
    while not (
        [e for e in EVENTS if e[0] == victim.address] and victim.state.executing
    ):  # a chunk done there, and the next one running
        time.sleep(0.002)
    # as when its host dies: the scheduler loses it unexpectedly (a closed worker says goodbye)
    cl.sync(cl.scheduler.remove_worker, victim.address, stimulus_id="test-kill", expected=False)
    thread.join(30)
    assert got, "measure_batch did not return"
    return context, got[0]


def test_a_worker_lost_mid_round_costs_no_candidate_when_others_can_retry(cluster):
    cl, client = cluster
    context, results = _close_a_worker_mid_round(cl, client, 16)
    assert all(r.error_kind == MeasureErrorKind.NO_ERROR for r in results)  # rescheduled
    assert context.lost_chunks == 0 and context.gpu_workers() == 1


@pytest.mark.parametrize("cluster", [0], indirect=True)
def test_without_retries_a_lost_worker_loses_only_its_in_flight_candidates(cluster):
    cl, client = cluster
    context, results = _close_a_worker_mid_round(cl, client, 16)
    failed = [i for i, r in enumerate(results) if r.error_kind != MeasureErrorKind.NO_ERROR]
    assert len(failed) == 4 and failed == list(range(failed[0], failed[0] + 4))  # its chunk
    assert all("lost on the cluster" in results[i].error_msg for i in failed)
    assert context.lost_chunks == 1


def test_a_cluster_without_gpu_workers_is_refused(cluster):
    cl, client = cluster
    for worker in list(cl.workers.values()):
        cl.sync(worker.close)
    for chunk_size in (None, 1):  # refused at once, not after the timeout
        context = DaskMeasureContext(
            client, context_factory=fake_context, wait_for_workers=0.2, chunk_size=chunk_size
        )
        with pytest.raises(GPUUnavailableError, match="no worker with the resource GPU"):
            context.measure_batch(artifacts(2))


def test_closing_a_context_on_a_given_client_closes_the_workers_contexts(cluster):
    cl, client = cluster
    close_worker_contexts()  # those of earlier tests' clusters (this process holds them all)
    CLOSED.clear()
    context = DaskMeasureContext(client, context_factory=fake_context, chunk_size=2)
    context.measure_batch(artifacts(8))
    context.close()
    assert len(CLOSED) == 2  # one per worker: their runner processes end
    assert client.status == "running"  # the caller's client stays open


PARAMS = SearchParams(population=16, generations=1, n_jobs=1, seed=0)


def test_records_of_the_cluster_land_in_one_log_on_the_client(cluster, tmp_path):
    cl, client = cluster
    task = autosched.SearchTask("matmul", (8, 8, 8))
    states = autosched.sample_initial_population(autosched.generate_sketches(task), 6, 0)
    log = str(tmp_path / "log.json")
    context = DaskMeasureContext(client, context_factory=fake_context, chunk_size=2)
    measurer = ProgramMeasurer(task, callbacks=[RecordToFile(log)], context=context)
    results = measurer.measure(states)
    measurer.close()  # the context is not its own: it stays open
    assert all(r.ok for r in results), [r.error_msg for r in results]
    records = list(load_records(log))
    assert len(records) == len(states) and {i.workload_key for i, _ in records} == {
        task.workload_key
    }
    assert {ref for _, ref, *_ in EVENTS} == {task.workload_key}  # the reference went along
    assert context.gpu_workers() == 2


def test_two_tasks_of_a_model_are_tuned_at_once_on_two_gpus(cluster, tmp_path, monkeypatch):
    cl, client = cluster
    rounds: list[tuple[str, float, float]] = []  # (task, start, end) of each round
    plain_tune = PolicyTuner.tune

    def tune(self, n):
        start = time.monotonic()
        try:
            return plain_tune(self, n)
        finally:
            rounds.append((self.task.workload_key, start, time.monotonic()))

    monkeypatch.setattr(PolicyTuner, "tune", tune)
    tasks = [autosched.SearchTask("matmul", (16, 16, 8)), autosched.SearchTask("matmul", (8, 8, 8))]
    log = str(tmp_path / "model.json")
    context = DaskMeasureContext(client, context_factory=fake_context, chunk_size=2)
    result = tune_tasks(
        tasks,
        [1, 1],
        log,
        16,
        num_measures_per_round=8,
        search_params=PARAMS,
        cost_model=autosched.XGBModel(nthread=1, seed=0),
        measure_context=context,
        verbose=0,
    )
    assert result.trials == [8, 8]
    assert len(list(load_records(log))) == 16
    assert {ref for _, ref, *_ in EVENTS} == {t.workload_key for t in tasks}
    (ka, a0, a1), (kb, b0, b1) = sorted(rounds, key=lambda r: r[1])[:2]  # the first two rounds
    assert ka != kb and a0 < b1 and b0 < a1, "the two tasks' rounds did not run at once"
