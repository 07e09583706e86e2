"""Build a State into a runnable kernel object: CUDA source, launch configuration, arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched.errors import OptionError
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.lowering import lower
from autosched.lower.tma_ir import tensor_maps
from autosched.lower.unrolling import compiled_statements
from autosched.schedule.loop_state import ScheduledDAG, State
from measure import ArgSpec, KernelArtifact, Launch
from measure.artifact import TensorMapSpec


@dataclass
class BuiltKernel:
    """The result of `autosched.build(dag, state)`.

    Arguments: `args` lists the kernel parameters in order: the DAG's tensors in the order the
    workload returned them (inputs, then outputs, for a workload returning
    `[inputs..., outputs...]`; a placeholder it did not return comes after them), then the global
    temporaries of a multi-kernel program. `inputs` and `outputs` are the two kinds among the
    DAG's tensors.

    Running: call it on numpy arrays (the GPU through pycuda: outputs copied back in place) or
    torch CUDA tensors; `run_cpu` runs it on the lock-step interpreter instead (no GPU);
    `time_evaluator()` times it on the GPU. `program` is the device program (`lower` then
    `device_passes.device_program`): `source` prints it, every kernel of it, and `run_cpu` runs
    it; `launches` runs its kernels in order.
    """

    program: ir.Program
    source: str
    launches: tuple[Launch, ...]
    args: tuple[ArgSpec, ...]

    @property
    def entry_name(self) -> str:
        """The name of the first kernel (TVM's `func.entry_name`, for `time_evaluator`)."""
        return self.launches[0].kernel_name

    @property
    def tensor_args(self) -> tuple[ArgSpec, ...]:
        """The arguments that are the DAG's tensors (all but the global temporaries)."""
        return self.args[: len(self.args) - len(self.program.temps)]

    @property
    def inputs(self) -> tuple[ArgSpec, ...]:
        """The DAG's input tensors, in argument order."""
        return tuple(a for a in self.tensor_args if not a.is_output)

    @property
    def outputs(self) -> tuple[ArgSpec, ...]:
        """The DAG's output tensors, in argument order."""
        return tuple(a for a in self.tensor_args if a.is_output)

    def artifact(self, reference_id: str | None = None, tag: str = "") -> KernelArtifact:
        """The measure/ artifact of this kernel (its compile cost: the statements nvcc emits)."""
        cost = sum(compiled_statements(k.body) for k in self.program.kernels)
        return KernelArtifact(self.source, self.launches, self.args, reference_id, tag, cost)

    def run_cpu(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Run on the CPU interpreter, in one of two forms:

        - `run_cpu(*inputs)`: the input arrays only (`self.inputs`' order); outputs and
          temporaries are allocated, and the outputs are returned (a list in `self.outputs`'
          order);
        - `run_cpu(*arrays)`: arrays in argument order, outputs included (temporaries may be
          omitted); they are written in place and all of them are returned.

        Any other number of arrays raises OptionError (a missing input is never zero-filled).
        """
        from autosched.lower.interpreter import run_program

        if len(arrays) == len(self.inputs):
            named = self._named(dict(zip((a.name for a in self.inputs), arrays, strict=True)))
            run_program(self.program, named)
            return [named[a.name] for a in self.outputs]
        self.check_array_count("run_cpu", len(arrays), inputs_only=True)
        named = self._named({a.name: arr for a, arr in zip(self.args, arrays, strict=False)})
        run_program(self.program, named)
        return [named[a.name] for a in self.args[: len(arrays)]]

    def check_array_count(self, what: str, count: int, inputs_only: bool = False) -> None:
        """Raise OptionError unless `count` arrays cover every tensor argument (temporaries may
        be left out): a missing input would otherwise run as zeros, or as whatever the GPU's
        memory held."""
        if len(self.tensor_args) <= count <= len(self.args):
            return
        names = ", ".join(a.name for a in self.tensor_args)
        inputs = ", ".join(a.name for a in self.inputs)
        takes = f"the {len(self.inputs)} inputs ({inputs}), or " if inputs_only else ""
        raise OptionError(
            f"{what} takes {takes}the {len(self.tensor_args)} tensor arguments ({names}), got "
            f"{count} array{'' if count == 1 else 's'}"
        )

    def _named(self, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every argument by name: the given arrays, zeros for the rest."""
        return {
            a.name: given[a.name] if a.name in given else np.zeros(a.shape, a.dtype)
            for a in self.args
        }

    def __call__(self, *arrays: Any) -> None:
        """Run on the GPU. numpy arrays are copied in and outputs copied back in place; torch
        CUDA tensors are used directly."""
        from autosched.codegen.gpu_call import launch_on_gpu

        launch_on_gpu(self, arrays)

    def launcher(self, *tensors: Any):
        """A zero-argument callable that launches this kernel on torch CUDA tensors (argument
        order; temporaries may be omitted) without copies or synchronisation, for timing."""
        from autosched.codegen.gpu_call import GPULauncher

        return GPULauncher(self, tensors)

    def time_evaluator(
        self,
        func_name: str | None = None,
        dev: Any = None,
        number: int = 10,
        repeat: int = 1,
        min_repeat_ms: float = 0.0,
        cooldown_interval_ms: float = 0.0,
        **ignored: Any,
    ):
        """TVM's `func.time_evaluator(func.entry_name, dev, min_repeat_ms=500)`: a callable
        that times this kernel on the GPU on the arrays it is given and returns a
        `timing.ProfileResult` (`.results`: seconds per run, one per repeat; `.mean`).
        `func_name`, `dev` and TVM's other options are accepted and ignored (all kernels
        run, on device 0)."""
        from autosched.codegen.timing import TimeEvaluator

        del func_name, dev, ignored
        return TimeEvaluator(self, number, repeat, min_repeat_ms, cooldown_interval_ms)


def build(dag: ScheduledDAG, state: State, fast_math: bool = False) -> BuiltKernel:
    """Lower a State of `dag`, run the device passes and print the CUDA source. TVM's call
    forms (`build(sch, args, target)`, `build(state)`) are `autosched.build`
    (`compat.build`)."""
    del dag  # the state carries its DAG; the pair is the call form every caller has at hand
    return build_program(device_program(lower(state)), fast_math=fast_math)


def kernel_tensor_maps(kernel: ir.Kernel) -> tuple[TensorMapSpec, ...]:
    """The tensor-map parameters of `kernel` (`lower/tma_ir.py`) as `measure` encodes them,
    in the order the printer declares them."""
    out = []
    for m in tensor_maps(kernel):
        dims, strides, box = m.encoding()
        if m.im2col is None:
            out.append(TensorMapSpec(m.buffer.name, dims, strides, box, m.swizzle))
            continue
        spatial = [tuple(reversed(x)) for x in (m.im2col.lower, m.im2col.upper, m.im2col.strides)]
        out.append(TensorMapSpec(m.buffer.name, dims, strides, box, m.swizzle, *spatial))
    return tuple(out)


def build_program(program: ir.Program, fast_math: bool = False) -> BuiltKernel:
    """A BuiltKernel of a device program (printed as it is: `build` runs the passes first);
    also for programs built by hand."""
    from autosched.codegen.cuda import codegen_program, dynamic_shared_bytes

    source = codegen_program(program, fast_math=fast_math)
    # a kernel over 48 KB of shared memory declares it dynamic: its launch sizes it; a kernel
    # with TMA copies takes its tensor maps after the pointers; a cluster kernel's launch
    # carries its cluster size (above 8 blocks a launcher must allow it first)
    launches = tuple(
        Launch(k.name, k.grid, k.block, dynamic_shared_bytes(k), kernel_tensor_maps(k), k.cluster)
        for k in program.kernels
    )
    outputs = {id(b) for b in program.outputs}
    zeroed = {id(b) for b in program.workspaces}
    args = tuple(
        ArgSpec(b.name, tuple(b.shape), b.dtype, id(b) in outputs, id(b) in zeroed)
        for b in program.params
    )
    return BuiltKernel(program, source, launches, args)
