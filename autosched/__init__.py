"""autosched: a template-free auto-scheduler for CUDA (Ansor-style), in Python.

task = autosched.SearchTask(func=conv2d_layer, args=(...), target="cuda")
state, kernel = autosched.auto_schedule(task, tuning_options=autosched.TuningOptions(...))
"""

from autosched import te, topi
from autosched.codegen.build import BuiltKernel, build
from autosched.records import MeasureInput, RecordToFile, apply_steps, load_best, load_records
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State
from autosched.search.auto_schedule import TuningOptions, TuningResult, auto_schedule
from autosched.search.cost_model import RandomModel, XGBModel
from autosched.search.policy import PreloadMeasuredStates, SearchParams, SketchPolicy
from autosched.task.search_task import SearchTask
from autosched.task.workload_registry import register_workload
from measure import HardwareParams, LocalBuilder, LocalRunner

__version__ = "0.1.0"

__all__ = [
    "te",
    "topi",
    "ComputeDAG",
    "SearchTask",
    "register_workload",
    "TuningOptions",
    "TuningResult",
    "auto_schedule",
    "RecordToFile",
    "load_records",
    "load_best",
    "apply_steps",
    "MeasureInput",
    "XGBModel",
    "RandomModel",
    "LocalBuilder",
    "LocalRunner",
    "HardwareParams",
    "SketchPolicy",
    "SearchParams",
    "PreloadMeasuredStates",
    "State",
    "build",
    "BuiltKernel",
]
