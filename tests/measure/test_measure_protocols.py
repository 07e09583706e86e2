"""The contract of `measure.MeasureContext`, parametrised over every implementation: the local
context with one runner and with a pool of runners, and the Dask cluster's context (an in-process
cluster of two GPU workers). Fake builders and runners stand in for nvcc and the GPU."""

from __future__ import annotations

import time

import pytest

from measure import (
    BuildResult,
    KernelArtifact,
    Launch,
    LocalMeasureContext,
    MeasureContext,
    MeasureErrorKind,
    RunnerPool,
)
from tests.measure.test_device_pool import FakeRunner


class FakeBuilder:
    """Builds instantly; an artifact whose source says "bad" fails to compile."""

    def build_as_completed(self, artifacts):
        for i, art in enumerate(artifacts):
            if "bad" in art.source:
                yield i, BuildResult(None, {}, MeasureErrorKind.COMPILE_ERROR, "no")
            else:
                yield i, BuildResult(art.source.encode(), {}, finished_at=time.perf_counter())

    def close(self) -> None:
        pass


def artifacts(n: int) -> list[KernelArtifact]:
    """n kernels, every odd one that fails to build."""
    launch = (Launch("k", (1,), (32,)),)
    return [KernelArtifact(f"// k{i} {'bad' if i % 2 else ''}", launch, ()) for i in range(n)]


def local_context(request):
    return LocalMeasureContext(FakeBuilder(), FakeRunner(delay=0.001)), 1


def pooled_context(request):
    runners = [FakeRunner(delay=0.001), FakeRunner(delay=0.001)]
    return LocalMeasureContext(FakeBuilder(), RunnerPool(runners)), 2


def worker_context():
    """What each Dask worker measures with (importable by the in-process workers)."""
    return LocalMeasureContext(FakeBuilder(), FakeRunner(delay=0.001))


def dask_context(request):
    distributed = pytest.importorskip("distributed")
    from autosched.search.distributed import DaskMeasureContext

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        resources={"GPU": 1},
        dashboard_address=None,
    )
    request.addfinalizer(cluster.close)
    return DaskMeasureContext(cluster.scheduler_address, context_factory=worker_context), 2


CONTEXTS = {"local": local_context, "pool": pooled_context, "dask": dask_context}


@pytest.mark.parametrize("make", CONTEXTS.values(), ids=CONTEXTS.keys())
def test_a_measure_context_gives_one_result_per_artifact_in_order(make, request):
    context, gpus = make(request)
    try:
        assert isinstance(context, MeasureContext)
        assert context.gpu_count() == gpus
        results = context.measure_batch(artifacts(6))
        # a failed build is a result, in its place
        kinds = [r.error_kind for r in results]
        assert kinds == [MeasureErrorKind.NO_ERROR, MeasureErrorKind.COMPILE_ERROR] * 3
        assert all(r.costs for r in results[::2]) and not any(r.costs for r in results[1::2])
        assert context.measure_batch([]) == []
    finally:
        context.close()
