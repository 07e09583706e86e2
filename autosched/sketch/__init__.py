"""Sketch generation and random annotation for CUDA (Ansor's SketchPolicy, GPU rules).

    sketches = generate_sketches(dag)                         # a few States, tile sizes unknown
    states = sample_initial_population(sketches, 100, rng)    # complete, launchable States

`rules.GPU_RULES` lists the sketch rules in order, `init_rules.GPU_INIT_RULES` the annotation
rules; `utils.SketchParams` holds every knob.
"""

from __future__ import annotations

from typing import Any

from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State
from autosched.sketch.rules import GPU_RULES, SketchContext, generate
from autosched.sketch.sampler import SketchSampler
from autosched.sketch.utils import SketchParams
from measure.hardware import HardwareParams


def _dag_and_hardware(dag_or_task: Any, hardware: Any) -> tuple[ComputeDAG, Any]:
    if isinstance(dag_or_task, ComputeDAG):
        return dag_or_task, hardware
    dag = getattr(dag_or_task, "compute_dag", None) or getattr(dag_or_task, "dag", None)
    if not isinstance(dag, ComputeDAG):
        raise TypeError(
            f"generate_sketches needs a ComputeDAG or a task with one, got {dag_or_task!r}"
        )
    if hardware is None:
        hardware = getattr(dag_or_task, "hardware_params", None)
    return dag, hardware


def sketch_context(
    hardware: HardwareParams | None = None, params: SketchParams | None = None
) -> SketchContext:
    """The sketch rules' context: the GPU's limits (default HardwareParams()) and parameters."""
    return SketchContext(hardware or HardwareParams(), params or SketchParams())


def generate_sketches(
    dag_or_task: Any, hardware: Any = None, params: SketchParams | None = None
) -> list[State]:
    """The sketches of a DAG (or of a task's DAG) for a GPU: States whose split lengths are
    None. Deterministic: the same DAG gives the same sketches in the same order. Given a task
    and no `params`, the task's `allow_tf32` option is kept."""
    if params is None:
        params = SketchParams.for_task(dag_or_task)
    dag, hardware = _dag_and_hardware(dag_or_task, hardware)
    return generate(dag.get_init_state(), sketch_context(hardware, params), GPU_RULES)


def sample_initial_population(
    sketches: list[State],
    n: int,
    rng: Any = None,
    hardware: Any = None,
    params: SketchParams | None = None,
    verify: bool = True,
    stats: Any = None,
) -> list[State]:
    """Up to n distinct complete states drawn from `sketches` by the init rules, each checked
    against the GPU limits (after lowering when `verify`). `rng`: a seed, random.Random or
    numpy Generator. Pass a `collections.Counter` as `stats` to get the rejection reasons."""
    sampler = SketchSampler(sketches, hardware, params, verify)
    states = sampler.sample(n, rng)
    if stats is not None:
        stats.update(sampler.rejected)
    return states


__all__ = ["generate_sketches", "sample_initial_population", "SketchParams", "SketchSampler"]
