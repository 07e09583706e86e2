"""Tensor map kernel parameters: encoding a `TensorMapSpec` for a device buffer with the driver's
`cuTensorMapEncodeTiled` or, for an im2col map, `cuTensorMapEncodeIm2col` (through ctypes:
pycuda has no binding), and laying out a kernel's
parameter buffer of pointers followed by tensor maps.

A tensor map is a 128-byte, 64-byte aligned opaque struct (`CUtensorMap`) that the kernel takes
by value (`const __grid_constant__`), at the parameter offset its cubin records. It holds the
buffer's address, so a runner that cycles through copies of its buffers (`measure.rotation`)
encodes one per copy.
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
    """libcuda's `cuTensorMapEncodeTiled` and `cuTensorMapEncodeIm2col` (CUDA 12.0 and
    later)."""

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
        ),
        "cuTensorMapEncodeIm2col": (
            ctypes.c_void_p,  # CUtensorMap* out
            ctypes.c_int,  # CUtensorMapDataType
            ctypes.c_uint32,  # rank
            ctypes.c_void_p,  # global address
            ctypes.POINTER(ctypes.c_uint64),  # globalDim[rank]
            ctypes.POINTER(ctypes.c_uint64),  # globalStrides[rank - 1], bytes
            ctypes.POINTER(ctypes.c_int),  # pixelBoxLowerCorner[rank - 2]
            ctypes.POINTER(ctypes.c_int),  # pixelBoxUpperCorner[rank - 2]
            ctypes.c_uint32,  # channelsPerPixel
            ctypes.c_uint32,  # pixelsPerColumn
            ctypes.POINTER(ctypes.c_uint32),  # elementStrides[rank]
            ctypes.c_int,  # CUtensorMapInterleave
            ctypes.c_int,  # CUtensorMapSwizzle
            ctypes.c_int,  # CUtensorMapL2promotion
            ctypes.c_int,  # CUtensorMapFloatOOBfill
        ),
    }
    error = TensorMapError

    def encode(self, spec: TensorMapSpec, dtype: str, address: int) -> bytes:
        """The 128 bytes of `spec` over the buffer of element type `dtype` at device
        `address`."""
        if dtype not in DATA_TYPES:
            raise TensorMapError(f"no tensor map element type for {dtype}")
        out = (ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))()
        rank = spec.rank
        if spec.im2col:
            spatial = rank - 2
            self.call(
                "cuTensorMapEncodeIm2col",
                ctypes.cast(out, ctypes.c_void_p),
                DATA_TYPES[dtype],
                rank,
                ctypes.c_void_p(int(address)),
                (ctypes.c_uint64 * rank)(*spec.dims),
                (ctypes.c_uint64 * (rank - 1))(*spec.strides_bytes),
                (ctypes.c_int * spatial)(*spec.lower_corner),
                (ctypes.c_int * spatial)(*spec.upper_corner),
                spec.box[0],
                spec.box[1],
                (ctypes.c_uint32 * rank)(1, *spec.traversal_strides, 1),
                INTERLEAVE_NONE,
                SWIZZLES[spec.swizzle],
                L2_PROMOTION_128B,
                OOB_FILL_ZEROS,
            )
            return bytes(out)
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
    """The `struct` format of a parameter buffer of `pointers` 64-bit pointers, then `maps`
    tensor maps each at the next 64-byte offset: the layout of a parameter bank that starts
    64-byte aligned, and the fallback where a cubin does not say. A compiled kernel may place its
    maps elsewhere (sm_90's bank starts 16 bytes past such a boundary): `kernel_param_offsets`
    reads its own offsets, which `pack_params` then follows. Without tensor maps: "P" per
    pointer, as before."""
    fmt, at = "P" * pointers, POINTER_BYTES * pointers
    for _ in range(maps):
        pad = -at % TENSOR_MAP_ALIGN
        fmt += f"{pad}x" if pad else ""
        fmt += f"{TENSOR_MAP_BYTES}s"
        at += pad + TENSOR_MAP_BYTES
    return fmt


def pack_params(
    pointers: Sequence[int], maps: Sequence[bytes] = (), offsets: Sequence[int] | None = None
) -> bytes:
    """The parameter buffer of a kernel taking `pointers` then the encoded `maps`: at
    `offsets` (one per parameter, as the compiled kernel places them: `kernel_param_offsets`)
    where given, else as `param_format` lays them out."""
    if any(len(m) != TENSOR_MAP_BYTES for m in maps):
        raise ValueError(f"an encoded tensor map is {TENSOR_MAP_BYTES} bytes")
    if offsets is None or not maps:
        return struct.pack(param_format(len(pointers), len(maps)), *pointers, *maps)
    if len(offsets) != len(pointers) + len(maps):
        raise ValueError(f"{len(offsets)} parameter offsets for {len(pointers) + len(maps)}")
    values = [struct.pack("P", p) for p in pointers] + list(maps)
    out = bytearray(max(o + len(v) for o, v in zip(offsets, values, strict=True)))
    for at, value in zip(offsets, values, strict=True):
        out[at : at + len(value)] = value
    return bytes(out)


KPARAM_INFO = 0x17  # EIATTR_KPARAM_INFO: one parameter's ordinal, offset and size
EIFMT_SVAL = 0x04  # an attribute with a 16-bit length and that many bytes of value


def kernel_param_offsets(cubin: bytes, kernel: str) -> list[int] | None:
    """Each parameter's byte offset in `kernel`'s parameter buffer, by position, as the cubin's
    `.nv.info.<kernel>` section records them; None where the cubin is no ELF that says.

    A tensor map is 64-byte aligned in the parameter bank as the hardware addresses it, not in
    the buffer the driver copies there (on sm_90 the bank's parameters start 16 bytes past a
    64-byte boundary), so only the compiled kernel knows where its maps go."""
    try:
        if cubin[:4] != b"\x7fELF" or cubin[4] != 2:  # ELF64
            return None
        shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        entsize, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
        sections = [
            struct.unpack_from("<I4xQ8xQQ", cubin, shoff + i * entsize) for i in range(count)
        ]
        strings = sections[names][2]

        def name(at: int) -> str:
            start = strings + at
            return cubin[start : cubin.index(b"\0", start)].decode()

        wanted = f".nv.info.{kernel}"
        found: dict[int, int] = {}
        for label, _, offset, size in sections:
            if name(label) != wanted:
                continue
            at, end = offset, offset + size
            while at + 4 <= end:
                fmt, attr = cubin[at], cubin[at + 1]
                if fmt != EIFMT_SVAL:
                    at += 4  # fmt, attr and a 16-bit value
                    continue
                length = struct.unpack_from("<H", cubin, at + 2)[0]
                if attr == KPARAM_INFO:
                    _, ordinal, param_offset = struct.unpack_from("<IHH", cubin, at + 4)
                    found[ordinal] = param_offset
                at += 4 + length
        if not found or sorted(found) != list(range(len(found))):
            return None
        return [found[i] for i in range(len(found))]
    except (struct.error, ValueError, IndexError):
        return None


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
    "kernel_param_offsets",
    "load_tensor_map_driver",
    "pack_params",
    "param_format",
]
