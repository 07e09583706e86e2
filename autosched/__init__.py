"""autosched: a template-free auto-scheduler for CUDA (Ansor-style), in Python.

task = autosched.SearchTask(func=conv2d_layer, args=(...), target="cuda")
state, kernel = autosched.auto_schedule(task, tuning_options=autosched.TuningOptions(...))

TVM's auto_scheduler tutorials run with `import autosched as auto_scheduler` (see compat.py for
`create_task` and `LocalRPCMeasureContext`). Without a GPU: `generate_sketches`,
`sample_initial_population` (or a `SketchSampler`), `build`, then `BuiltKernel.run_cpu`
against `evaluate`, the numpy reference.
"""

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

__version__ = "0.1.0"

__all__ = [
    "te",
    "topi",
    "ComputeDAG",
    "SearchTask",
    "create_task",
    "register_workload",
    "TuningOptions",
    "TuningResult",
    "auto_schedule",
    "LocalRPCMeasureContext",
    "RecordToFile",
    "load_records",
    "load_best",
    "apply_steps",
    "MeasureInput",
    "MeasureRecordResult",
    "XGBModel",
    "RandomModel",
    "LocalBuilder",
    "LocalRunner",
    "HardwareParams",
    "SketchPolicy",
    "SearchParams",
    "PreloadMeasuredStates",
    "State",
    "generate_sketches",
    "sample_initial_population",
    "SketchSampler",
    "SketchParams",
    "evaluate",
    "build",
    "BuiltKernel",
    "ProfileResult",
    "TaskScheduler",
    "tune_tasks",
    "template",
    "TemplateTask",
    "apply_history_best",
    "Schedule",
    "tune_space",
]
