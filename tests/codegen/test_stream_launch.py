"""The driver-API launcher (`codegen/stream_launch.py`) with tensor maps: each launch gets its
own maps, encoded for the call's pointers and kept while they stay the same, at 64-byte aligned
host addresses (a fake libcuda: no GPU needed)."""

from __future__ import annotations

import ctypes

from autosched.codegen import stream_launch
from measure.artifact import Launch
from measure.tensor_map import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES, TensorMapDriver
from tests.measure.test_tensor_map import A_MAP, B_MAP, A, B, C, FakeLibcuda


def test_each_launch_gets_its_maps_encoded_for_the_pointers_once(monkeypatch):
    lib = FakeLibcuda()
    monkeypatch.setattr(stream_launch, "load_tensor_map_driver", lambda: TensorMapDriver(lib))
    kernel = stream_launch.StreamKernel.__new__(stream_launch.StreamKernel)
    launches = (Launch("first", (1,), (32,), 0, (A_MAP, B_MAP)), Launch("second", (1,), (32,)))
    kernel._launches = [(None, x) for x in launches]
    kernel._args = (A, B, C)
    kernel._maps_for = None
    first, second = kernel._maps((4096, 8192, 12288))
    assert len(first) == 2 and second == []
    assert [c["address"] for c in lib.calls] == [4096, 8192]
    for m in first:
        assert ctypes.addressof(m) % TENSOR_MAP_ALIGN == 0
        assert bytes(m) == bytes(range(TENSOR_MAP_BYTES))
    kernel._maps((4096, 8192, 12288))
    assert len(lib.calls) == 2  # same pointers: the maps are reused
    kernel._maps((16384, 8192, 12288))
    assert [c["address"] for c in lib.calls[2:]] == [16384, 8192]
