"""Entry functions compiled apart (`LocalBuilder(split_entries=True)`) run on the GPU as the
whole source does: the runner loads each from its own cubin, the outputs check against the
reference, and the times agree (the machine code is the same). Marked `gpu`; run with

    python -m pytest -q -m gpu tests/gpu/test_gpu_split_entries.py
"""

from __future__ import annotations

import math
import statistics

import pytest

import autosched
from autosched.search.program_measurer import task_reference
from autosched.task.search_task import suite_task
from measure import LocalBuilder, LocalMeasureContext, LocalRunner, MeasureErrorKind

pytestmark = pytest.mark.gpu

AGREEMENT = 0.05  # geometric mean of split / whole times allowed off 1 (timing noise)


def test_two_kernel_programs_compiled_apart_run_correctly_and_as_fast():
    from autosched.sketch import SketchSampler, generate_sketches
    from autosched.sketch.utils import SketchParams

    task = suite_task("conv2d_bias_relu")
    params = SketchParams.for_task(task)
    split_k = [
        s
        for s in generate_sketches(task.compute_dag, task.hardware_params, params)
        if any(st.op.name.endswith(".rf") for st in s.stages)
    ]
    states = SketchSampler(split_k, params=params).sample(8, 0)
    kernels = [autosched.build(task.compute_dag, s) for s in states]
    assert all(len(k.launches) == 2 for k in kernels)
    ref = task_reference(task, kernels[0].args)
    artifacts = [k.artifact(reference_id="ref", tag=str(i)) for i, k in enumerate(kernels)]
    results = {}
    for split in (False, True):
        builder = LocalBuilder(timeout=60.0, split_entries=split)
        with LocalMeasureContext(builder, LocalRunner()) as ctx:
            results[split] = ctx.measure_batch(artifacts, {"ref": ref})
    whole, apart = results[False], results[True]
    assert [r.error_kind for r in apart] == [r.error_kind for r in whole], [
        r.error_msg for r in apart
    ]
    ratios = [
        statistics.mean(a.costs) / statistics.mean(w.costs)
        for a, w in zip(apart, whole, strict=True)
        if w.error_kind == MeasureErrorKind.NO_ERROR
    ]
    assert ratios, [r.error_msg for r in whole]
    mean_ratio = math.exp(statistics.mean(math.log(r) for r in ratios))
    assert abs(mean_ratio - 1) <= AGREEMENT, ratios
