"""On the GPU: states recorded by searches (tests/recorded.py) at their recorded size, run
directly against numpy and through the search's measurement path (builder, runner worker,
reference check) among sampled states of the same task. tests/lower/test_recorded_states.py runs
the same states on the interpreter at a small batch.

Every test is marked `gpu` (tests/conftest.py skips them where pycuda sees no device). Run them
with

    python -m pytest -q -n 0 -m gpu -s tests/gpu/test_gpu_recorded.py
"""

from __future__ import annotations

import numpy as np
import pytest

from autosched import build
from autosched.search.program_measurer import task_reference
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from measure import LocalBuilder, LocalMeasureContext, LocalRunner
from measure.reference import compare_output
from tests.lower.test_recorded_states import DOWNSAMPLE, TF32_TOLERANCE
from tests.recorded import recorded_task

pytestmark = pytest.mark.gpu

SIBLINGS = 24  # sampled states of the task measured around the recorded one
REPEATS = 4  # times the recorded state is measured among them


@pytest.fixture(scope="module")
def downsample():
    return recorded_task(DOWNSAMPLE)


def test_the_downsample_state_matches_numpy_on_the_gpu(downsample):
    task, state = downsample
    kernel = build(task.compute_dag, state)
    rng = np.random.default_rng(0)
    arrays = [
        np.full(a.shape, np.nan, np.float32)
        if a.is_output
        else rng.uniform(-1, 1, a.shape).astype(np.float32)
        for a in kernel.args
    ]
    named = {a.name: x for a, x in zip(kernel.args, arrays, strict=True)}
    outputs = [a.name for a in kernel.args if a.is_output]
    dag = task.compute_dag
    expected = evaluate(dag, {t.name: named[t.name] for t in dag.tensors if t.name not in outputs})
    kernel(*arrays)
    for name in outputs:
        assert compare_output(name, named[name], expected[name], *TF32_TOLERANCE) is None


def test_the_downsample_state_passes_the_runners_check_among_its_siblings(downsample):
    """The recorded state measured REPEATS times, each after a few sampled states of its task
    (the same reference, as in a search): every measurement of it passes the check. A sibling
    refused as a wrong answer is printed with the state measured before it: run that pair on
    the interpreter (tests/interpreter_check.py) to tell a wrong kernel from a measurement that
    went wrong."""
    task, state = downsample
    params = SketchParams.for_task(task)
    sketches = generate_sketches(task.compute_dag, task.hardware_params, params)
    siblings = SketchSampler(sketches, params=params).sample(SIBLINGS, 0)
    step = max(1, len(siblings) // REPEATS)
    order = []
    for k in range(REPEATS):
        order += [*siblings[k * step : (k + 1) * step], state]
    kernels = [build(task.compute_dag, s) for s in order]
    ref = task_reference(task, kernels[-1].args)
    artifacts = [k.artifact(reference_id="ref", tag=str(i)) for i, k in enumerate(kernels)]
    with LocalMeasureContext(LocalBuilder(timeout=120.0), LocalRunner()) as ctx:
        results = ctx.measure_batch(artifacts, {"ref": ref})
    for i, r in enumerate(results):
        if r.error_kind.name == "WRONG_ANSWER":
            print(f"candidate {i} (recorded: {order[i] is state}) after {i - 1}: {r.error_msg}")
    recorded = [r for s, r in zip(order, results, strict=True) if s is state]
    assert all(r.error_kind.name == "NO_ERROR" for r in recorded), [r.error_msg for r in recorded]
