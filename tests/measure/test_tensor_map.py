"""Tensor map kernel parameters (`measure.tensor_map`, `measure.artifact.TensorMapSpec`): the
spec's checks and record form, the driver call `cuTensorMapEncodeTiled` as libcuda receives it
(a fake library on the CPU; the real one under `-m gpu`), and the parameter buffer a kernel
taking pointers and tensor maps is launched with."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

from measure import _worker, compile_kernel
from measure.artifact import ArgSpec, KernelArtifact, Launch, TensorMapSpec
from measure.tensor_map import (
    DATA_TYPES,
    SWIZZLES,
    TENSOR_MAP_BYTES,
    TensorMapDriver,
    TensorMapError,
    encode_launch_maps,
    kernel_param_offsets,
    pack_params,
    param_format,
)
from tests.compilers import needs_nvcc

A = ArgSpec("A", (256, 192), "float16")
B = ArgSpec("B", (192, 128), "bfloat16")
C = ArgSpec("C", (256, 128), "float32", is_output=True)
A_MAP = TensorMapSpec("A", (192, 256), (384,), (64, 128), "128B")  # 128 x 64 boxes of A
B_MAP = TensorMapSpec("B", (128, 192), (256,), (64, 64), "128B")
D = ArgSpec("D", (2, 14, 14, 64), "float16")  # NHWC
# im2col copies of 128 pixels x 64 channels of D: a 3x3 window, padding 1, stride 2
D_MAP = TensorMapSpec(
    "D", (64, 14, 14, 2), (128, 1792, 25088), (64, 128), "128B", (-1, -1), (-2, -2), (2, 2)
)


def artifact(*maps: TensorMapSpec) -> KernelArtifact:
    launch = Launch("k", (2, 1), (32, 8), 98304, maps)
    return KernelArtifact("// src", (launch,), (A, B, C, D), None)


# ---- the spec -------------------------------------------------------------------------------


def test_a_launch_with_tensor_maps_round_trips_and_one_without_keeps_its_record_form():
    art = artifact(A_MAP, B_MAP, D_MAP)
    assert art.validate() is None
    again = KernelArtifact.from_dict(art.to_dict())
    assert again == art and again.launches[0].tensor_maps == (A_MAP, B_MAP, D_MAP)
    assert "lower_corner" not in A_MAP.to_dict() and D_MAP.im2col and not A_MAP.im2col
    plain = Launch("k", (1,), (32,))
    assert "tensor_maps" not in plain.to_dict()
    assert Launch.from_dict(plain.to_dict()) == plain


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (TensorMapSpec("X", (192, 256), (384,), (64, 128)), "unknown 'X'"),
        (TensorMapSpec("A", (192, 256), (390,), (64, 128)), "multiples of 16 bytes"),
        (TensorMapSpec("A", (192, 256), (384,), (64, 512)), "extents must be 1 to 256"),
        (TensorMapSpec("A", (192, 256), (384,), (4, 128)), "not a multiple of 16"),
        (TensorMapSpec("A", (192, 256), (384,), (128, 64), "128B"), "at most 128 bytes"),
        (TensorMapSpec("A", (192, 256), (384,), (64, 128), "64B"), "unknown swizzle"),
        (TensorMapSpec("A", (192, 512), (384,), (64, 128)), "a 98304-byte argument"),
        (TensorMapSpec("A", (192, 256), (), (64, 128)), "one fewer stride"),
        (
            TensorMapSpec("D", D_MAP.dims, D_MAP.strides_bytes, (64, 128), "128B", (-1,), (-2,)),
            "corners and strides of rank - 2",
        ),
    ],
)
def test_a_tensor_map_the_driver_would_refuse_is_a_malformed_artifact(spec, says):
    problem = artifact(spec).validate()
    assert problem is not None and says in problem, problem


# ---- the driver call ------------------------------------------------------------------------


class FakeLibcuda:
    """Stands in for libcuda: records each cuTensorMapEncodeTiled call's arguments as plain
    values and writes a recognisable 128 bytes, or fails with CUDA_ERROR_INVALID_VALUE (1)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[dict] = []
        self.fail = fail

        def encode(out, dtype, rank, address, dims, strides, box, elem_strides, *modes):
            self.calls.append(
                {
                    "dtype": dtype,
                    "rank": rank,
                    "address": getattr(address, "value", address),
                    "dims": list(dims[:rank]),
                    "strides": list(strides[: rank - 1]),
                    "box": list(box[:rank]),
                    "element_strides": list(elem_strides[:rank]),
                    "modes": list(modes),
                }
            )
            if self.fail:
                return 1
            filler = bytes(range(TENSOR_MAP_BYTES))
            ctypes.memmove(out, filler, TENSOR_MAP_BYTES)
            return 0

        def error_name(code, text):
            text._obj.value = b"CUDA_ERROR_INVALID_VALUE"
            return 0

        def encode_im2col(out, dtype, rank, address, dims, strides, lower, upper, *rest):
            channels, pixels, elem_strides, *modes = rest
            self.calls.append(
                {
                    "dtype": dtype,
                    "rank": rank,
                    "dims": list(dims[:rank]),
                    "strides": list(strides[: rank - 1]),
                    "corners": (list(lower[: rank - 2]), list(upper[: rank - 2])),
                    "box": [channels, pixels],
                    "element_strides": list(elem_strides[:rank]),
                    "modes": list(modes),
                }
            )
            ctypes.memmove(out, bytes(range(TENSOR_MAP_BYTES)), TENSOR_MAP_BYTES)
            return 0

        self.cuTensorMapEncodeTiled = encode
        self.cuTensorMapEncodeIm2col = encode_im2col
        self.cuGetErrorName = error_name


def test_encode_passes_the_spec_to_the_driver_innermost_first_with_zero_fill():
    lib = FakeLibcuda()
    got = TensorMapDriver(lib).encode(A_MAP, "float16", 0x7F0000001000)
    assert got == bytes(range(TENSOR_MAP_BYTES))
    (call,) = lib.calls
    assert call == {
        "dtype": DATA_TYPES["float16"],
        "rank": 2,
        "address": 0x7F0000001000,
        "dims": [192, 256],
        "strides": [384],
        "box": [64, 128],
        "element_strides": [1, 1],
        # no interleave, the 128-byte swizzle, L2 promotion 128 bytes, out of bounds = zeros
        "modes": [0, SWIZZLES["128B"], 2, 0],
    }
    assert DATA_TYPES["float16"] == 6 and DATA_TYPES["bfloat16"] == 9 and SWIZZLES["128B"] == 3


def test_an_im2col_map_is_encoded_with_its_corners_and_traversal_strides():
    lib = FakeLibcuda()
    TensorMapDriver(lib).encode(D_MAP, "float16", 4096)
    (call,) = lib.calls
    assert call == {
        "dtype": DATA_TYPES["float16"],
        "rank": 4,
        "dims": [64, 14, 14, 2],
        "strides": [128, 1792, 25088],
        "corners": ([-1, -1], [-2, -2]),
        "box": [64, 128],  # channels per pixel, pixels per column
        "element_strides": [1, 2, 2, 1],  # C, W, H, N: the convolution's stride on W and H
        "modes": [0, SWIZZLES["128B"], 2, 0],
    }


def test_a_refused_encoding_names_the_driver_error():
    with pytest.raises(TensorMapError, match="CUDA_ERROR_INVALID_VALUE"):
        TensorMapDriver(FakeLibcuda(fail=True)).encode(A_MAP, "float16", 4096)


def test_each_map_is_encoded_over_the_pointer_of_its_own_argument():
    lib = FakeLibcuda()
    launch = artifact(B_MAP, A_MAP).launches[0]
    maps = encode_launch_maps(TensorMapDriver(lib), launch, (A, B, C), [4096, 8192, 12288])
    assert len(maps) == 2
    assert [c["address"] for c in lib.calls] == [8192, 4096]
    assert [c["dtype"] for c in lib.calls] == [DATA_TYPES["bfloat16"], DATA_TYPES["float16"]]
    assert encode_launch_maps(None, Launch("k", (1,), (32,)), (A, B, C), [1, 2, 3]) == []


# ---- the parameter buffer -------------------------------------------------------------------


def test_tensor_maps_follow_the_pointers_each_on_a_64_byte_boundary():
    maps = [bytes([1]) * TENSOR_MAP_BYTES, bytes([2]) * TENSOR_MAP_BYTES]
    buf = pack_params([11, 22, 33], maps)
    assert len(buf) == struct.calcsize(param_format(3, 2)) == 64 + 2 * 128
    assert struct.unpack_from("PPP", buf) == (11, 22, 33)
    assert buf[24:64] == bytes(40)  # padding up to the first map's alignment
    assert buf[64:192] == maps[0] and buf[192:320] == maps[1]
    assert pack_params([11, 22, 33]) == struct.pack("PPP", 11, 22, 33)  # no maps: as before
    assert len(pack_params([1] * 8, maps[:1])) == 64 + 128  # 8 pointers end on the boundary


class _Function:
    """A pycuda Function stand-in that records what each launch path receives."""

    def __init__(self, launch_kernel: bool) -> None:
        self.launched: list = []
        if launch_kernel:
            self._launch_kernel = lambda grid, block, buf, shared, stream: self.launched.append(
                bytes(buf)
            )

    def prepare(self, fmt: str) -> None:
        self.format = fmt

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0) -> None:
        self.launched.append(struct.pack(self.format, *args))


@pytest.mark.parametrize("launch_kernel", [True, False])
def test_the_worker_launches_each_kernel_with_its_own_tensor_maps(launch_kernel):
    first, second = _Function(launch_kernel), _Function(launch_kernel)
    calls = [(first, (1, 1, 1), (32, 1, 1), 0), (second, (1, 1, 1), (32, 1, 1), 0)]
    maps = [[bytes([7]) * TENSOR_MAP_BYTES], []]
    run = _worker._sequence(calls, [4096, 8192], maps)
    run()
    assert first.launched == [pack_params([4096, 8192], maps[0])]
    assert second.launched == [pack_params([4096, 8192])]


# ---- GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_driver_encodes_a_map_over_a_device_buffer():
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as drv

    from measure.tensor_map import load_tensor_map_driver

    buf = drv.mem_alloc(A.nbytes)
    try:
        got = load_tensor_map_driver().encode(A_MAP, A.dtype, int(buf))
        assert len(got) == TENSOR_MAP_BYTES and np.frombuffer(got, np.uint8).any()
        with pytest.raises(TensorMapError):  # rows of 256 bytes under the 128-byte swizzle
            bad = TensorMapSpec("A", (192, 256), (384,), (128, 64), "128B")
            load_tensor_map_driver().encode(bad, A.dtype, int(buf))
    finally:
        buf.free()


def test_parameters_go_where_the_compiled_kernel_takes_them():
    maps = [bytes([3]) * TENSOR_MAP_BYTES]
    buf = pack_params([11, 22], maps, offsets=[0, 8, 48])
    assert len(buf) == 48 + TENSOR_MAP_BYTES
    assert struct.unpack_from("PP", buf) == (11, 22) and buf[48:] == maps[0]
    assert pack_params([11, 22], [], offsets=None) == struct.pack("PP", 11, 22)


@needs_nvcc
def test_the_offsets_of_a_kernels_parameters_come_from_its_cubin():
    """On sm_90 the parameter bank starts 16 bytes past a 64-byte boundary: a tensor map after
    two pointers sits at byte 48 of the buffer, not 64."""
    from tests.measure.test_tensor_map_gpu import tile_copy_source

    _, message, cubin, _ = compile_kernel(tile_copy_source("128B"), "sm_90")
    assert cubin is not None, message
    assert kernel_param_offsets(cubin, "tile_copy") == [0, 8, 48]
    assert kernel_param_offsets(cubin, "no_such_kernel") is None
    assert kernel_param_offsets(b"not a cubin", "tile_copy") is None
