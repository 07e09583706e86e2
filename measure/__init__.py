"""measure: build and time CUDA kernels in isolated processes (kernel source in, timings out).

It knows nothing of autosched's IR: it is given `KernelArtifact`s (CUDA source, launches,
argument specs) and `Reference`s (inputs and expected outputs) and returns results carrying a
`MeasureErrorKind`. Only the runner's worker process touches the GPU.
"""

from measure.artifact import ArgSpec, KernelArtifact, Launch, TensorMapSpec
from measure.builder import BuildResult, LocalBuilder, check_resources, compile_resources
from measure.compiler import compile_kernel, compile_source, find_compiler
from measure.context import LocalMeasureContext, MeasureResult
from measure.device_pool import RunnerPool, local_runner, visible_devices
from measure.errors import (
    CompileError,
    DeviceMismatchError,
    GPUUnavailableError,
    MeasureError,
    MeasureErrorKind,
    NvccNotFoundError,
)
from measure.framing import pack, unpack
from measure.hardware import HardwareParams, device_arch
from measure.kernel_cache import KernelCache
from measure.protocols import MeasureContext
from measure.ptxas import KernelResources, find_nvcc, parse_ptxas
from measure.reference import (
    DEFAULT_TOLERANCES,
    Reference,
    compare_output,
    compare_outputs,
    default_tolerance,
    make_reference,
    random_array,
)
from measure.runner import LocalRunner, RunResult, gpu_available

__all__ = [
    "KernelCache",
    "ArgSpec",
    "BuildResult",
    "CompileError",
    "DEFAULT_TOLERANCES",
    "DeviceMismatchError",
    "GPUUnavailableError",
    "HardwareParams",
    "KernelArtifact",
    "KernelResources",
    "Launch",
    "LocalBuilder",
    "LocalMeasureContext",
    "LocalRunner",
    "MeasureContext",
    "MeasureError",
    "MeasureErrorKind",
    "MeasureResult",
    "NvccNotFoundError",
    "Reference",
    "RunResult",
    "RunnerPool",
    "TensorMapSpec",
    "check_resources",
    "compare_output",
    "compare_outputs",
    "compile_kernel",
    "compile_resources",
    "compile_source",
    "default_tolerance",
    "device_arch",
    "find_compiler",
    "find_nvcc",
    "gpu_available",
    "local_runner",
    "make_reference",
    "pack",
    "parse_ptxas",
    "random_array",
    "unpack",
    "visible_devices",
]
