"""Build a State into a runnable kernel object: CUDA source, launch configuration, arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.lowering import lower
from autosched.lower.unrolling import compiled_statements
from measure import ArgSpec, KernelArtifact, Launch


@dataclass
class BuiltKernel:
    """The result of `autosched.build(dag, state)`.

    `program` is the device program (`lower` then `device_passes.device_program`): `source`
    prints it and `run_cpu` runs it. `source` holds every kernel; `launches` runs them in order;
    `args` lists the kernel parameters (the DAG's tensors, then global temporaries). Call it on
    numpy arrays (GPU through pycuda) or use `run_cpu` (the lock-step interpreter).
    """

    program: ir.Program
    source: str
    launches: tuple[Launch, ...]
    args: tuple[ArgSpec, ...]

    def artifact(self, reference_id: str | None = None, tag: str = "") -> KernelArtifact:
        """The measure/ artifact of this kernel (its compile cost: the statements nvcc emits)."""
        cost = sum(compiled_statements(k.body) for k in self.program.kernels)
        return KernelArtifact(self.source, self.launches, self.args, reference_id, tag, cost)

    def run_cpu(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Run on the CPU interpreter; arrays in argument order (temporaries may be omitted)."""
        from autosched.lower.interpreter import run_program

        named = self._named(arrays)
        run_program(self.program, named)
        return [named[a.name] for a in self.args[: len(arrays)]]

    def _named(self, arrays) -> dict[str, np.ndarray]:
        named = {}
        for spec, arr in zip(self.args, arrays, strict=False):  # temporaries may be omitted
            named[spec.name] = arr
        for spec in self.args[len(arrays) :]:
            named[spec.name] = np.zeros(spec.shape, spec.dtype)
        return named

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


def build(dag, state, fast_math: bool = False) -> BuiltKernel:
    """Lower `state` (a State of `dag`), run the device passes and print the CUDA source."""
    from autosched.codegen.cuda import codegen_program

    program = device_program(lower(state))
    source = codegen_program(program, fast_math=fast_math)
    launches = tuple(Launch(k.name, k.grid, k.block, 0) for k in program.kernels)
    outputs = {id(b) for b in program.outputs}
    args = tuple(ArgSpec(b.name, tuple(b.shape), b.dtype, id(b) in outputs) for b in program.params)
    return BuiltKernel(program, source, launches, args)
