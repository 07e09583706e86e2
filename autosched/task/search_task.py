"""SearchTask: a DAG to tune, its workload key, target and hardware parameters, and whether
its float32 matrix products may use TF32 Tensor Cores (`allow_tf32`, off by default)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autosched.checks import boolean
from autosched.errors import AutoschedError, OptionError
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.workload_registry import (
    make_workload_key,
    split_workload_key,
    tf32_workload_key,
)
from autosched.task.workloads import SUITE
from measure.hardware import HardwareParams

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State


class SearchTask:
    """`SearchTask(func=conv2d_layer, args=(...), target="cuda")`, or `SearchTask(dag=...)`.

    `allow_tf32=True` lets the search put float32 matrix products on the Tensor Cores with
    their operands rounded to TF32 (10-bit mantissa; measured results are checked with a
    tolerance to match). The option is part of the task's workload key
    (`workload_registry.tf32_workload_key`), so it travels with the key to record logs,
    worker processes and measurements, and a key that carries it turns it on."""

    def __init__(
        self,
        func: Callable | str | None = None,
        args: Any = (),
        target: str = "cuda",
        dag: ComputeDAG | None = None,
        workload_key: str | None = None,
        hardware_params: HardwareParams | None = None,
        desc: str = "",
        allow_tf32: bool = False,
    ) -> None:
        if dag is not None and not isinstance(dag, ComputeDAG):
            raise OptionError(
                f"SearchTask's dag must be a ComputeDAG, got {type(dag).__name__} {dag!r:.60}"
                " (for a registered workload give func= and args=, or workload_key=)"
            )
        allow_tf32 = boolean("allow_tf32", allow_tf32)
        if target != "cuda":
            raise AutoschedError(f"unsupported target {target!r}; autosched generates CUDA only")
        if dag is None:
            if workload_key is None:
                if func is None:
                    raise AutoschedError("SearchTask needs func (+args), a workload_key, or a dag")
                workload_key = make_workload_key(func, args)
            dag = ComputeDAG.from_workload_key(workload_key)
        key = dag.workload_key if workload_key is None else workload_key
        self.allow_tf32 = bool(allow_tf32) or split_workload_key(key)[1]
        dag.workload_key = tf32_workload_key(key, self.allow_tf32)
        self.compute_dag = dag
        self.workload_key = dag.workload_key
        self.target = target
        self.hardware_params = hardware_params or HardwareParams()
        self.desc = desc or self.workload_key

    def apply_best(self, log_file: str) -> State | None:
        """The best measured state of this task in a record log (None when there is none)."""
        from autosched.records import load_best

        best = load_best(log_file, self.workload_key)
        return None if best is None else self.compute_dag.replay_steps(best[0].steps)

    def __repr__(self) -> str:
        return f"SearchTask({self.workload_key})"


def suite_task(name: str, reduced: bool = False, allow_tf32: bool = False) -> SearchTask:
    """The SearchTask of suite workload `name`, at full size or at its reduced size."""
    workload, full, small = SUITE[name]
    return SearchTask(workload, small if reduced else full, allow_tf32=allow_tf32)
