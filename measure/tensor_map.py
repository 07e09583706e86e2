"""Tensor map kernel parameters: encoding a `TensorMapSpec` for a device buffer with the driver's
`cuTensorMapEncodeTiled` (through ctypes: pycuda has no binding), and laying out a kernel's
parameter buffer of pointers followed by tensor maps.

A tensor map is a 128-byte, 64-byte aligned opaque struct (`CUtensorMap`) that the kernel takes
by value (`const __grid_constant__`). It holds the buffer's address, so a runner that cycles
through copies of its buffers (`measure.rotation`) encodes one per copy.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import ClassVar

from measure.artifact import ArgSpec, Launch, TensorMapSpec
from measure.cuda_driver import CudaDriver

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
POINTER_BYTES = 8

# CUtensorMapDataType by the artifact's element type names (cuda.h)
DATA_TYPES = {
    "uint8": 0,
    "uint16": 1,
    "uint32": 2,
    "int32": 3,
    "uint64": 4,
    "int64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}
SWIZZLES = {"none": 0, "128B": 3}  # CUtensorMapSwizzle
INTERLEAVE_NONE = 0  # CUtensorMapInterleave
L2_PROMOTION_128B = 2  # CUtensorMapL2promotion
OOB_FILL_ZEROS = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as zero


class TensorMapError(RuntimeError):
    """The driver refused to encode a tensor map."""


class TensorMapDriver(CudaDriver):
    """libcuda's `cuTensorMapEncodeTiled` (CUDA 12.0 and later)."""

    SIGNATURES: ClassVar[dict[str, tuple]] = {
        "cuTensorMapEncodeTiled": (
            ctypes.c_void_p,  # CUtensorMap* out
            ctypes.c_int,  # CUtensorMapDataType
            ctypes.c_uint32,  # rank
            ctypes.c_void_p,  # global address
            ctypes.POINTER(ctypes.c_uint64),  # globalDim[rank]
            ctypes.POINTER(ctypes.c_uint64),  # globalStrides[rank - 1], bytes
            ctypes.POINTER(ctypes.c_uint32),  # boxDim[rank]
            ctypes.POINTER(ctypes.c_uint32),  # elementStrides[rank]
            ctypes.c_int,  # CUtensorMapInterleave
            ctypes.c_int,  # CUtensorMapSwizzle
            ctypes.c_int,  # CUtensorMapL2promotion
            ctypes.c_int,  # CUtensorMapFloatOOBfill
        )
    }
    error = TensorMapError

    def encode(self, spec: TensorMapSpec, dtype: str, address: int) -> bytes:
        """The 128 bytes of `spec` over the buffer of element type `dtype` at device
        `address`."""
        if dtype not in DATA_TYPES:
            raise TensorMapError(f"no tensor map element type for {dtype}")
        out = (ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))()
        rank = spec.rank
        self.call(
            "cuTensorMapEncodeTiled",
            ctypes.cast(out, ctypes.c_void_p),
            DATA_TYPES[dtype],
            rank,
            ctypes.c_void_p(int(address)),
            (ctypes.c_uint64 * rank)(*spec.dims),
            (ctypes.c_uint64 * max(1, rank - 1))(*spec.strides_bytes),
            (ctypes.c_uint32 * rank)(*spec.box),
            (ctypes.c_uint32 * rank)(*([1] * rank)),
            INTERLEAVE_NONE,
            SWIZZLES[spec.swizzle],
            L2_PROMOTION_128B,
            OOB_FILL_ZEROS,
        )
        return bytes(out)


def load_tensor_map_driver() -> TensorMapDriver:
    """The encoder bound from libcuda; TensorMapError when libcuda or its entry point is
    missing."""
    try:
        return TensorMapDriver.load()
    except (OSError, AttributeError) as exc:
        raise TensorMapError(f"cuTensorMapEncodeTiled is unavailable: {exc}") from exc


def param_format(pointers: int, maps: int) -> str:
    """The `struct` format of a kernel's parameter buffer of `pointers` 64-bit pointers, then
    `maps` tensor maps each at the next 64-byte boundary (the alignment of `CUtensorMap`), as
    the kernel's parameter layout places them. Without tensor maps: "P" per pointer, as
    before."""
    fmt, at = "P" * pointers, POINTER_BYTES * pointers
    for _ in range(maps):
        pad = -at % TENSOR_MAP_ALIGN
        fmt += f"{pad}x" if pad else ""
        fmt += f"{TENSOR_MAP_BYTES}s"
        at += pad + TENSOR_MAP_BYTES
    return fmt


def pack_params(pointers: Sequence[int], maps: Sequence[bytes] = ()) -> bytes:
    """The parameter buffer of a kernel taking `pointers` then the encoded `maps`."""
    if any(len(m) != TENSOR_MAP_BYTES for m in maps):
        raise ValueError(f"an encoded tensor map is {TENSOR_MAP_BYTES} bytes")
    return struct.pack(param_format(len(pointers), len(maps)), *pointers, *maps)


def encode_launch_maps(
    encoder: TensorMapDriver | None,
    launch: Launch,
    args: Sequence[ArgSpec],
    pointers: Sequence[int],
) -> list[bytes]:
    """The encoded tensor maps of `launch` over the buffers at `pointers` (one per argument of
    `args`, in order): what follows the pointers in its parameter buffer."""
    if not launch.tensor_maps:
        return []
    if encoder is None:
        raise TensorMapError(f"{launch.kernel_name} takes tensor maps, but no encoder is loaded")
    where = {a.name: i for i, a in enumerate(args)}
    return [
        encoder.encode(m, args[where[m.arg]].dtype, pointers[where[m.arg]])
        for m in launch.tensor_maps
    ]


__all__ = [
    "DATA_TYPES",
    "SWIZZLES",
    "TENSOR_MAP_ALIGN",
    "TENSOR_MAP_BYTES",
    "TensorMapDriver",
    "TensorMapError",
    "encode_launch_maps",
    "load_tensor_map_driver",
    "pack_params",
    "param_format",
]
