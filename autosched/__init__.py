"""autosched: a template-free auto-scheduler for CUDA (Ansor-style), in Python.

task = autosched.SearchTask(func=conv2d_layer, args=(...), target="cuda")
state, kernel = autosched.auto_schedule(task, tuning_options=autosched.TuningOptions(...))

TVM's auto_scheduler tutorials run with `import autosched as auto_scheduler` (see compat.py for
`create_task` and `LocalRPCMeasureContext`). Without a GPU: `generate_sketches`,
`sample_initial_population` (or a `SketchSampler`), `build`, then `BuiltKernel.run_cpu`
against `evaluate`, the numpy reference.

The names below load on first use (PEP 562), so that `import autosched` itself needs nothing
beyond the standard library: the command line imports only what its command uses (and a
Ctrl-C while it loads ends in one line), and `python -m autosched.install` runs before the
package's dependencies are installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "te": "autosched.te",
    "topi": "autosched.topi",
    "ComputeDAG": "autosched.schedule.compute_dag",
    "SearchTask": "autosched.task.search_task",
    "create_task": "autosched.compat",
    "register_workload": "autosched.task.workload_registry",
    "TuningOptions": "autosched.search.auto_schedule",
    "TuningResult": "autosched.search.auto_schedule",
    "auto_schedule": "autosched.search.auto_schedule",
    "LocalRPCMeasureContext": "autosched.compat",
    "RecordToFile": "autosched.records",
    "load_records": "autosched.records",
    "load_best": "autosched.records",
    "apply_steps": "autosched.records",
    "MeasureInput": "autosched.records",
    "MeasureRecordResult": "autosched.records",
    "XGBModel": "autosched.search.cost_model",
    "RandomModel": "autosched.search.cost_model",
    "LocalBuilder": "measure",
    "LocalRunner": "measure",
    "HardwareParams": "measure",
    "SketchPolicy": "autosched.search.policy",
    "SearchParams": "autosched.search.policy",
    "PreloadMeasuredStates": "autosched.search.policy",
    "State": "autosched.schedule.loop_state",
    "generate_sketches": "autosched.compat",
    "sample_initial_population": "autosched.sketch",
    "SketchSampler": "autosched.sketch",
    "SketchParams": "autosched.sketch",
    "evaluate": "autosched.task.evaluate",
    "build": "autosched.compat",
    "BuiltKernel": "autosched.codegen.build",
    "ProfileResult": "autosched.codegen.timing",
    "TaskScheduler": "autosched.search.task_scheduler",
    "tune_tasks": "autosched.search.tune_model",
    "template": "autosched.spaces.template",
    "TemplateTask": "autosched.spaces.template",
    "apply_history_best": "autosched.spaces.history",
    "Schedule": "autosched.spaces.stochastic",
    "tune_space": "autosched.spaces.tune_space",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use, then keep it here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autosched' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if module == f"autosched.{name}" else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


# What type checkers and editors see: the same names, imported eagerly. They are re-exports,
# which ruff cannot tell from the computed __all__:
# ruff: noqa: F401
if TYPE_CHECKING:
    from autosched import te, topi
    from autosched.codegen.build import BuiltKernel
    from autosched.codegen.timing import ProfileResult
    from autosched.compat import LocalRPCMeasureContext, build, create_task, generate_sketches
    from autosched.records import (
        MeasureInput,
        MeasureRecordResult,
        RecordToFile,
        apply_steps,
        load_best,
        load_records,
    )
    from autosched.schedule.compute_dag import ComputeDAG
    from autosched.schedule.loop_state import State
    from autosched.search.auto_schedule import TuningOptions, TuningResult, auto_schedule
    from autosched.search.cost_model import RandomModel, XGBModel
    from autosched.search.policy import PreloadMeasuredStates, SearchParams, SketchPolicy
    from autosched.search.task_scheduler import TaskScheduler
    from autosched.search.tune_model import tune_tasks
    from autosched.sketch import SketchParams, SketchSampler, sample_initial_population
    from autosched.spaces.history import apply_history_best
    from autosched.spaces.stochastic import Schedule
    from autosched.spaces.template import TemplateTask, template
    from autosched.spaces.tune_space import tune_space
    from autosched.task.evaluate import evaluate
    from autosched.task.search_task import SearchTask
    from autosched.task.workload_registry import register_workload
    from measure import HardwareParams, LocalBuilder, LocalRunner
