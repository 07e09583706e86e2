"""Several GPUs of one host, on the GPU machine: the runner pool measures a batch on all of
them, and the same kernels timed on each device agree within 3%. Marked `gpu` (skipped where
pycuda sees no device); skipped with fewer than two devices.

    python -m pytest -q -m gpu tests/gpu/test_gpu_multi.py
"""

from __future__ import annotations

import statistics

import pytest

import autosched
from autosched.search.program_measurer import ProgramMeasurer, _local_workers, task_reference
from autosched.task.search_task import suite_task
from measure import LocalBuilder, RunnerPool, visible_devices

pytestmark = pytest.mark.gpu
AGREEMENT = 0.03


def _devices() -> list[int]:
    devices = visible_devices()
    if len(devices) < 2:
        pytest.skip(f"{len(devices)} CUDA device visible; this needs two")
    return devices


def _states(n: int):
    task = suite_task("conv2d_bias_relu")
    sketches = autosched.generate_sketches(task)
    return task, autosched.sample_initial_population(sketches, n, 0)


def test_a_batch_is_measured_on_every_device():
    devices = _devices()
    task, states = _states(32)
    pool = RunnerPool.for_devices(devices)
    measurer = ProgramMeasurer(task, LocalBuilder(), pool)
    try:
        results = measurer.measure(states)
    finally:
        measurer.close()
    assert sum(r.ok for r in results) >= len(results) // 4, [r.error_msg for r in results]
    assert all(n > 0 for n in pool.per_runner), pool.per_runner


def test_the_same_kernels_time_alike_on_every_device():
    devices = _devices()
    task, states = _states(24)
    made = _local_workers(task).build([s.key() for s in states], [s.fingerprint() for s in states])
    artifacts = [a for a in made if not isinstance(a, str)]
    refs = {task.workload_key: task_reference(task, artifacts[0].args)}
    with LocalBuilder() as builder:
        builds = builder.build(artifacts)
    checked = 0
    with RunnerPool.for_devices(devices, min_repeat_ms=20.0) as pool:
        for art, build in zip(artifacts, builds, strict=True):
            if not build.ok or checked == 4:
                continue
            passes = [pool.time_on_each(art, build, refs) for _ in range(3)]
            if any(not r.costs for p in passes for r in p):
                continue
            medians = [
                statistics.median(p[d].mean_cost for p in passes) for d in range(len(devices))
            ]
            assert max(medians) / min(medians) - 1 <= AGREEMENT, medians
            checked += 1
    assert checked, "no kernel of the sample ran correctly"
