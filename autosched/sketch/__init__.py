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


def sketch_context(
    hardware: HardwareParams | None = None, params: SketchParams | None = None
) -> SketchContext:
    """The sketch rules' context: the GPU's limits (default HardwareParams()) and parameters."""
    return SketchContext(hardware or HardwareParams(), params or SketchParams())


def generate_sketches(
    dag: ComputeDAG, hardware: HardwareParams | None = None, params: SketchParams | None = None
) -> list[State]:
    """The sketches of a DAG for a GPU: States whose split lengths are None. Deterministic: the
    same DAG gives the same sketches in the same order. A task's sketches, with its options:
    `generate_sketches(task.compute_dag, task.hardware_params, SketchParams.for_task(task))`,
    which `autosched.generate_sketches(task)` (`compat.generate_sketches`) spells shorter."""
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
