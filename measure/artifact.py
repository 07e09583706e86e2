"""Kernel artifacts: what `measure` is given to build and run (no knowledge of autosched's IR).

A program is one CUDA source holding one or more `extern "C" __global__` kernels that are launched
in order; every kernel takes *all* the arguments, as pointers, in `KernelArtifact.args` order, then
the tensor maps of its launch (`Launch.tensor_maps`), each a 128-byte `CUtensorMap` passed by
value that the runner encodes for the buffers it launches with (`measure.tensor_map`).
All classes here are frozen values with `to_dict()`/`from_dict()` (msgpack- and JSON-friendly).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from measure.bfloat16 import dtype_name, storage_dtype

Dim3 = tuple[int, int, int]
TENSOR_MAP_SWIZZLES = ("none", "128B")
TENSOR_MAP_MAX_RANK = 5
TENSOR_MAP_BOX_MAX = 256  # elements per box dimension
TENSOR_MAP_STRIDE_ALIGN = 16  # bytes: every global stride, and a box's inner extent
SWIZZLE_SPAN_BYTES = {"none": None, "128B": 128}  # the widest inner box extent a mode takes


def _dim3(value: Sequence[int]) -> Dim3:
    dims = [int(v) for v in value]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"a grid/block needs 1 to 3 dimensions, got {value!r}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One kernel argument: a dense row-major device buffer of `shape` and numpy `dtype`
    (or "bfloat16", stored as uint16 bit patterns: `measure.bfloat16`). `zeroed`: a scratch
    buffer (not an output) that must hold zeros when first launched on, and that the kernels
    leave zeroed (a counter of arriving blocks): filled with zeros once, when allocated."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool = False
    zeroed: bool = False

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
            "zeroed": self.zeroed,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ArgSpec:
        """Inverse of `to_dict`."""
        return cls(
            data["name"],
            tuple(data["shape"]),
            data["dtype"],
            bool(data["is_output"]),
            bool(data.get("zeroed", False)),
        )


@dataclasses.dataclass(frozen=True)
class TensorMapSpec:
    """A tensor map kernel parameter (`const __grid_constant__ CUtensorMap`, encoded with the
    driver's `cuTensorMapEncodeTiled`): a tiled view of the argument named `arg`, starting at
    its first element. `dims` (elements), `box` (elements one copy moves) and `strides_bytes`
    (of dimensions 1 .., so one fewer) are innermost dimension first, as the driver takes them;
    `swizzle` is "none" or "128B"; an im2col map (`cuTensorMapEncodeIm2col`) also has corners
    and traversal strides. Elements of a box outside `dims` read as zero; element
    strides are 1, no interleave, L2 promotion 128 bytes. The element type is the argument's."""

    arg: str
    dims: tuple[int, ...]
    strides_bytes: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: str = "none"
    # im2col mode (`cuTensorMapEncodeIm2col`) where `lower_corner` is given: the bounding box's
    # corners and traversal strides of the spatial dimensions (innermost first, W before H),
    # `box` = (channels per pixel, pixels per column)
    lower_corner: tuple[int, ...] = ()
    upper_corner: tuple[int, ...] = ()
    traversal_strides: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        fields = ("dims", "strides_bytes", "box", "lower_corner", "upper_corner")
        for name in (*fields, "traversal_strides"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def im2col(self) -> bool:
        return bool(self.lower_corner)

    def problem(self, spec: ArgSpec) -> str | None:
        """Why this map cannot describe the argument `spec` (the driver's rules), or None."""
        what = f"tensor map of {self.arg!r}"
        elem = storage_dtype(spec.dtype).itemsize
        if not 1 <= self.rank <= TENSOR_MAP_MAX_RANK:
            return f"{what}: rank {self.rank}, not 1 to {TENSOR_MAP_MAX_RANK}"
        boxes = 2 if self.im2col else self.rank
        if len(self.box) != boxes or len(self.strides_bytes) != self.rank - 1:
            return f"{what}: {self.rank} dims take {boxes} box extents and one fewer stride"
        spatial = (self.lower_corner, self.upper_corner, self.traversal_strides)
        if self.im2col and (self.rank < 3 or any(len(x) != self.rank - 2 for x in spatial)):
            return f"{what}: im2col over {self.rank} dims takes corners and strides of rank - 2"
        if any(d < 1 for d in self.dims):
            return f"{what}: dims {self.dims} must be positive"
        if any(s % TENSOR_MAP_STRIDE_ALIGN or s < 1 for s in self.strides_bytes):
            return f"{what}: strides {self.strides_bytes} must be positive multiples of 16 bytes"
        if any(not 1 <= b <= TENSOR_MAP_BOX_MAX for b in self.box):
            return f"{what}: box {self.box} extents must be 1 to {TENSOR_MAP_BOX_MAX}"
        inner = self.box[0] * elem
        if inner % TENSOR_MAP_STRIDE_ALIGN:
            return f"{what}: the box's inner extent is {inner} bytes, not a multiple of 16"
        if self.swizzle not in TENSOR_MAP_SWIZZLES:
            return f"{what}: unknown swizzle {self.swizzle!r} (one of {TENSOR_MAP_SWIZZLES})"
        span = SWIZZLE_SPAN_BYTES[self.swizzle]
        if span is not None and inner > span:
            return f"{what}: a {self.swizzle} swizzle takes box rows of at most {span} bytes"
        last = (self.dims[0] - 1) * elem + sum(
            (d - 1) * s for d, s in zip(self.dims[1:], self.strides_bytes, strict=True)
        )
        if last >= spec.nbytes:
            return f"{what}: reaches byte {last} of a {spec.nbytes}-byte argument"
        return None

    def to_dict(self) -> dict:
        """Plain-dict form."""
        return {
            "arg": self.arg,
            "dims": list(self.dims),
            "strides_bytes": list(self.strides_bytes),
            "box": list(self.box),
            "swizzle": self.swizzle,
        } | (
            {
                "lower_corner": list(self.lower_corner),
                "upper_corner": list(self.upper_corner),
                "traversal_strides": list(self.traversal_strides),
            }
            if self.im2col
            else {}
        )

    @classmethod
    def from_dict(cls, data: dict) -> TensorMapSpec:
        """Inverse of `to_dict`."""
        return cls(
            data["arg"],
            tuple(data["dims"]),
            tuple(data["strides_bytes"]),
            tuple(data["box"]),
            data.get("swizzle", "none"),
            tuple(data.get("lower_corner", ())),
            tuple(data.get("upper_corner", ())),
            tuple(data.get("traversal_strides", ())),
        )


@dataclasses.dataclass(frozen=True, init=False)
class Launch:
    """One kernel launch: entry name, grid and block dimensions, dynamic shared memory bytes,
    the tensor maps the kernel takes after the pointers, in parameter order, and the blocks of
    its thread-block clusters (the kernel declares them; a launcher reads them to allow a
    non-portable size first: `measure.cluster_size`).

    `grid` and `block` may be given with 1 to 3 dimensions; they are stored padded to 3 with 1s.
    """

    kernel_name: str
    grid: Dim3
    block: Dim3
    dynamic_shared_bytes: int = 0
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    cluster_blocks: int = 1

    def __init__(
        self,
        kernel_name: str,
        grid: Sequence[int],
        block: Sequence[int],
        dynamic_shared_bytes: int = 0,
        tensor_maps: Sequence[TensorMapSpec] = (),
        cluster_blocks: int = 1,
    ) -> None:
        object.__setattr__(self, "kernel_name", kernel_name)
        object.__setattr__(self, "grid", _dim3(grid))
        object.__setattr__(self, "block", _dim3(block))
        object.__setattr__(self, "dynamic_shared_bytes", int(dynamic_shared_bytes))
        object.__setattr__(self, "tensor_maps", tuple(tensor_maps))
        object.__setattr__(self, "cluster_blocks", int(cluster_blocks))

    @property
    def threads_per_block(self) -> int:
        """Product of the block dimensions."""
        return math.prod(self.block)

    def to_dict(self) -> dict:
        """Plain-dict form (`tensor_maps` only when there are some and `cluster_blocks` only
        above 1, so that records of kernels without them read as before)."""
        out = {
            "kernel_name": self.kernel_name,
            "grid": list(self.grid),
            "block": list(self.block),
            "dynamic_shared_bytes": self.dynamic_shared_bytes,
        }
        if self.tensor_maps:
            out["tensor_maps"] = [m.to_dict() for m in self.tensor_maps]
        if self.cluster_blocks > 1:
            out["cluster_blocks"] = self.cluster_blocks
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Launch:
        """Inverse of `to_dict`."""
        return cls(
            data["kernel_name"],
            tuple(data["grid"]),
            tuple(data["block"]),
            int(data.get("dynamic_shared_bytes", 0)),
            tuple(TensorMapSpec.from_dict(m) for m in data.get("tensor_maps", ())),
            int(data.get("cluster_blocks", 1)),
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
            by_name = {a.name: a for a in self.args}
            for m in launch.tensor_maps:
                if m.arg not in by_name:
                    return f"launch of {launch.kernel_name!r}: tensor map of unknown {m.arg!r}"
                problem = m.problem(by_name[m.arg])
                if problem:
                    return f"launch of {launch.kernel_name!r}: {problem}"
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
