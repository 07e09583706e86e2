"""Kernel artifacts: what `measure` is given to build and run (no knowledge of autosched's IR).

A program is one CUDA source holding one or more `extern "C" __global__` kernels that are launched
in order; every kernel takes *all* the arguments, as pointers, in `KernelArtifact.args` order.
All classes here are frozen values with `to_dict()`/`from_dict()` (msgpack- and JSON-friendly).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from measure.bfloat16 import dtype_name, storage_dtype

Dim3 = tuple[int, int, int]


def _dim3(value: Sequence[int]) -> Dim3:
    dims = [int(v) for v in value]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"a grid/block needs 1 to 3 dimensions, got {value!r}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One kernel argument: a dense row-major device buffer of `shape` and numpy `dtype`
    (or "bfloat16", stored as uint16 bit patterns: `measure.bfloat16`)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))  # validates and normalises
        if any(s < 0 for s in self.shape):
            raise ValueError(f"argument {self.name!r} has a negative extent: {self.shape}")

    @property
    def nbytes(self) -> int:
        """Size of the buffer in bytes."""
        return math.prod(self.shape) * storage_dtype(self.dtype).itemsize

    def to_dict(self) -> dict:
        """Plain-dict form."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "is_output": self.is_output,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ArgSpec:
        """Inverse of `to_dict`."""
        return cls(data["name"], tuple(data["shape"]), data["dtype"], bool(data["is_output"]))


@dataclasses.dataclass(frozen=True, init=False)
class Launch:
    """One kernel launch: entry name, grid and block dimensions, dynamic shared memory bytes.

    `grid` and `block` may be given with 1 to 3 dimensions; they are stored padded to 3 with 1s.
    """

    kernel_name: str
    grid: Dim3
    block: Dim3
    dynamic_shared_bytes: int = 0

    def __init__(
        self,
        kernel_name: str,
        grid: Sequence[int],
        block: Sequence[int],
        dynamic_shared_bytes: int = 0,
    ) -> None:
        object.__setattr__(self, "kernel_name", kernel_name)
        object.__setattr__(self, "grid", _dim3(grid))
        object.__setattr__(self, "block", _dim3(block))
        object.__setattr__(self, "dynamic_shared_bytes", int(dynamic_shared_bytes))

    @property
    def threads_per_block(self) -> int:
        """Product of the block dimensions."""
        return math.prod(self.block)

    def to_dict(self) -> dict:
        """Plain-dict form."""
        return {
            "kernel_name": self.kernel_name,
            "grid": list(self.grid),
            "block": list(self.block),
            "dynamic_shared_bytes": self.dynamic_shared_bytes,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Launch:
        """Inverse of `to_dict`."""
        return cls(
            data["kernel_name"],
            tuple(data["grid"]),
            tuple(data["block"]),
            int(data.get("dynamic_shared_bytes", 0)),
        )


@dataclasses.dataclass(frozen=True)
class KernelArtifact:
    """A CUDA program to build and time.

    `reference_id` names the `Reference` (in the runner's `references` dict) that checks the
    outputs; None means "time only" (inputs are then seeded random data). `tag` is free text for
    the caller (e.g. a state hash), carried along untouched. `compile_cost` estimates the compile
    time relative to the other artifacts of a batch (any unit; 0: unknown): the builder starts the
    costliest first, then the longest sources.
    """

    source: str
    launches: tuple[Launch, ...]
    args: tuple[ArgSpec, ...]
    reference_id: str | None = None
    tag: str = ""
    compile_cost: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "launches", tuple(self.launches))
        object.__setattr__(self, "args", tuple(self.args))

    def validate(self) -> str | None:
        """Return why the artifact is malformed (independently of any hardware), or None."""
        if not self.launches:
            return "the artifact has no launches"
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            return f"duplicate argument names in {names}"
        for launch in self.launches:
            if any(d < 1 for d in launch.grid + launch.block):
                return f"launch of {launch.kernel_name!r} has a zero or negative dimension"
            if launch.dynamic_shared_bytes < 0:
                return f"launch of {launch.kernel_name!r} has negative dynamic shared memory"
        if not any(a.is_output for a in self.args):
            return "no argument is marked as an output"
        return None

    def to_dict(self) -> dict:
        """Plain-dict form."""
        return {
            "source": self.source,
            "launches": [x.to_dict() for x in self.launches],
            "args": [a.to_dict() for a in self.args],
            "reference_id": self.reference_id,
            "tag": self.tag,
            "compile_cost": self.compile_cost,
        }

    @classmethod
    def from_dict(cls, data: dict) -> KernelArtifact:
        """Inverse of `to_dict`."""
        return cls(
            source=data["source"],
            launches=tuple(Launch.from_dict(x) for x in data["launches"]),
            args=tuple(ArgSpec.from_dict(a) for a in data["args"]),
            reference_id=data.get("reference_id"),
            tag=data.get("tag", ""),
            compile_cost=data.get("compile_cost", 0.0),
        )
