"""TVM auto_scheduler's spellings of autosched's entry points, so that its tutorials run with
`import autosched as auto_scheduler`: `create_task(func, args, target)`,
`LocalRPCMeasureContext(min_repeat_ms=300)`, whose `.runner` goes to `TuningOptions(runner=...)`,
and the call forms that take one of several types (`build(sch, args, target)` or
`build(dag, state)`, `generate_sketches(task)` or `generate_sketches(dag)`). The core functions
take one type each; this module is the one place that tells the forms apart.

TVM measures through an RPC tracker and server; autosched's runner is already an isolated worker
process (measure.LocalRunner), so the "RPC" context only configures and owns one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autosched.codegen import build as core_build
from autosched.codegen.build import BuiltKernel
from autosched.errors import AutoschedError
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State
from autosched.sketch import SketchParams
from autosched.sketch import generate_sketches as core_generate_sketches
from autosched.task.search_task import SearchTask
from measure import GPUUnavailableError, LocalRunner
from measure.hardware import HardwareParams


def cuda_target(target: Any) -> str:
    """The target name, "cuda", for any spelling of the CUDA target: the string, a TVM-style
    target string such as "cuda -arch=sm_90", or an object whose str() is one (a
    `tvm.target.Target("cuda")`). Any other target raises AutoschedError: autosched generates
    CUDA only."""
    words = str(target).split()
    if not words or words[0] != "cuda":
        raise AutoschedError(f"unsupported target {target!r}; autosched generates CUDA only")
    return "cuda"


def create_task(
    func: Callable | str,
    args: Any,
    target: Any = "cuda",
    target_host: Any = None,
    hardware_params: HardwareParams | None = None,
    allow_tf32: bool = False,
) -> SearchTask:
    """TVM's `auto_scheduler.create_task`: the SearchTask of a registered workload function
    called with `args`. `target_host` is accepted and ignored (the host side is Python);
    `allow_tf32` lets float32 products use TF32 Tensor Cores (off by default)."""
    del target_host
    return SearchTask(
        func, args, cuda_target(target), hardware_params=hardware_params, allow_tf32=allow_tf32
    )


def build(
    dag_or_state: ComputeDAG | State,
    state_or_args: State | Sequence | BuiltKernel | None = None,
    target: Any = "cuda",
    fast_math: bool = False,
) -> BuiltKernel:
    """`codegen.build.build` in every call form: `build(dag, state)` (a State of `dag`), TVM's
    `build(sch, args[, target])` with `sch, args = dag.apply_steps_from_state(state)` (args:
    the DAG's tensors, checked), with `sch, args = auto_schedule(...)` (the state and its
    kernel, rebuilt), or `build(state)`. `target` must name CUDA (`cuda_target`)."""
    cuda_target(target)
    state = _state_of(dag_or_state, state_or_args)
    return core_build.build(state.dag, state, fast_math=fast_math)


def _state_of(dag_or_state: object, state_or_args: object) -> State:
    """The State in `build`'s call forms, checking the tensor list of TVM's."""
    if isinstance(dag_or_state, ComputeDAG):
        if not isinstance(state_or_args, State):
            raise TypeError(f"build(dag, state) needs a State, got {type(state_or_args).__name__}")
        return state_or_args
    if not isinstance(dag_or_state, State):
        raise TypeError(
            f"build takes (dag, state) or (state, args), got {type(dag_or_state).__name__}"
        )
    state = dag_or_state
    if state_or_args is None or isinstance(state_or_args, BuiltKernel):
        return state
    if not isinstance(state_or_args, Sequence):
        raise TypeError(f"build(state, args) needs a tensor list, got {state_or_args!r}")
    names = [getattr(t, "name", t) for t in state_or_args]
    expected = [t.name for t in state.dag.tensors]
    if names != expected:
        raise AutoschedError(
            f"build(state, args): args must be the state's DAG tensors {expected} "
            f"(from `dag.apply_steps_from_state`), got {names}"
        )
    return state


def generate_sketches(
    dag_or_task: ComputeDAG | SearchTask,
    hardware: HardwareParams | None = None,
    params: SketchParams | None = None,
) -> list[State]:
    """`sketch.generate_sketches` of a DAG or of a task (its DAG, and unless given its
    hardware and the SketchParams of its options, `SketchParams.for_task`)."""
    if isinstance(dag_or_task, ComputeDAG):
        return core_generate_sketches(dag_or_task, hardware, params)
    if not isinstance(dag_or_task, SearchTask):
        raise TypeError(
            f"generate_sketches needs a ComputeDAG or a SearchTask, got {dag_or_task!r}"
        )
    task = dag_or_task
    return core_generate_sketches(
        task.compute_dag,
        hardware or task.hardware_params,
        params or SketchParams.for_task(task),
    )


class UnavailableRunner:
    """Stands in for a LocalRunner where none can be made (no pycuda): it keeps the settings and
    raises the reason at the first measurement, so that a tutorial's set-up code runs anywhere
    and fails only where it needs the GPU."""

    def __init__(self, error: GPUUnavailableError, **settings: Any) -> None:
        self.error = error
        self.settings = settings
        for name, value in settings.items():
            setattr(self, name, value)

    def run(self, *args: Any, **kwargs: Any):
        """Raise the GPUUnavailableError that making a LocalRunner gave."""
        raise GPUUnavailableError(str(self.error))

    def close(self) -> None:
        """Nothing to stop."""


class LocalRPCMeasureContext:
    """TVM's measurement context, in the tutorial's form:

        measure_ctx = LocalRPCMeasureContext(min_repeat_ms=300)
        options = TuningOptions(..., runner=measure_ctx.runner)
        ...
        del measure_ctx  # stops the runner's worker process

    `runner` is a measure.LocalRunner with these settings (each candidate: `number` runs per
    repeat, raised until a repeat lasts `min_repeat_ms`, `repeat` repeats; `timeout` seconds at
    most; `device`: the CUDA device). The defaults are LocalRunner's. TVM's `priority`,
    `n_parallel` and `enable_cpu_cache_flush` are accepted and ignored (one local GPU worker;
    no CPU caches to flush). Without pycuda, `runner` is an UnavailableRunner that raises at the
    first measurement instead of here.
    """

    def __init__(
        self,
        priority: int = 1,
        n_parallel: int = 1,
        timeout: float = 10.0,
        number: int = 3,
        repeat: int = 3,
        min_repeat_ms: float = 5.0,
        cooldown_interval: float = 0.0,
        enable_cpu_cache_flush: bool = False,
        device: int = 0,
    ) -> None:
        del priority, n_parallel, enable_cpu_cache_flush
        settings: dict[str, Any] = {
            "number": number,
            "repeat": repeat,
            "min_repeat_ms": min_repeat_ms,
            "timeout": timeout,
            "cooldown_interval": cooldown_interval,
            "device": device,
        }
        self.runner: LocalRunner | UnavailableRunner
        try:
            self.runner = LocalRunner(**settings)
        except GPUUnavailableError as exc:
            self.runner = UnavailableRunner(exc, **settings)

    def close(self) -> None:
        """Stop the runner's worker process (it restarts if the runner is used again)."""
        self.runner.close()

    def __enter__(self) -> LocalRPCMeasureContext:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # the tutorial ends measurement with `del measure_ctx`
        try:
            self.close()
        except Exception:
            pass


__all__ = [
    "LocalRPCMeasureContext",
    "UnavailableRunner",
    "build",
    "create_task",
    "cuda_target",
    "generate_sketches",
]
