"""`codegen/gpu_call.py`'s preparation of a kernel taking tensor maps: the pycuda format of its
parameters (pointers, then each map on its 64-byte boundary) and the maps encoded over the
pointers it launches with (a fake libcuda; no GPU needed)."""

from __future__ import annotations

import struct

from autosched.codegen import gpu_call
from measure.artifact import Launch
from measure.tensor_map import TENSOR_MAP_BYTES, TensorMapDriver, pack_params
from tests.measure.test_tensor_map import A_MAP, A, B, C, FakeLibcuda


class _Function:
    def prepare(self, fmt: str) -> None:
        self.format = fmt


def test_a_launch_with_a_tensor_map_is_prepared_for_pointers_then_the_map(monkeypatch):
    lib = FakeLibcuda()
    monkeypatch.setattr(gpu_call, "_encoder", lambda: TensorMapDriver(lib))
    fn = _Function()
    maps = gpu_call._prepared(fn, Launch("k", (1,), (32,), 0, (A_MAP,)), (A, B, C), [16, 32, 48])
    assert maps == [bytes(range(TENSOR_MAP_BYTES))] and lib.calls[0]["address"] == 16
    assert struct.pack(fn.format, 16, 32, 48, *maps) == pack_params([16, 32, 48], maps)
    plain = _Function()
    assert gpu_call._prepared(plain, Launch("k", (1,), (32,)), (A, B, C), [16, 32, 48]) == []
    assert plain.format == "PPP"
