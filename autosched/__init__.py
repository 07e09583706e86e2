"""autosched: a template-free auto-scheduler for CUDA (Ansor-style), in Python.

    task = autosched.SearchTask(func=conv2d_layer, args=(...), target="cuda")
    state, kernel = autosched.auto_schedule(task, tuning_options=autosched.TuningOptions(...))
"""

from measure import HardwareParams, LocalBuilder, LocalRunner

from . import te, topi
from .auto_schedule import TuningOptions, TuningResult, auto_schedule
from .build_module import BuiltKernel, build
from .compute_dag import ComputeDAG
from .cost_model import RandomModel, XGBModel
from .loop_state import State
from .records import MeasureInput, RecordToFile, apply_steps, load_best, load_records
from .search_policy import PreloadMeasuredStates, SearchParams, SketchPolicy
from .search_task import SearchTask
from .workload_registry import register_workload

__version__ = "0.1.0"

__all__ = [
    "te", "topi", "ComputeDAG", "SearchTask", "register_workload", "TuningOptions", "TuningResult",
    "auto_schedule", "RecordToFile", "load_records", "load_best", "apply_steps", "MeasureInput",
    "XGBModel", "RandomModel", "LocalBuilder", "LocalRunner", "HardwareParams", "SketchPolicy",
    "SearchParams", "PreloadMeasuredStates", "State", "build", "BuiltKernel",
]
