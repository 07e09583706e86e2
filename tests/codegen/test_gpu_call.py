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


def test_a_launch_error_reports_what_the_launch_asked_for_and_what_the_function_needs():
    class Attributes:
        NUM_REGS, MAX_THREADS_PER_BLOCK, SHARED_SIZE_BYTES = "regs", "threads", "static"
        MAX_DYNAMIC_SHARED_SIZE_BYTES = "dynamic"  # LOCAL_SIZE_BYTES missing: left out

    class Drv:
        function_attribute = Attributes

    class Fn:
        def get_attribute(self, name):
            return {"regs": 90, "threads": 256, "static": 0, "dynamic": 49152}[name]

    launch = Launch("mm", (2, 2), (32, 8), 131104, (A_MAP,))
    report = gpu_call.launch_report(Drv, Fn(), launch, [b"x" * TENSOR_MAP_BYTES])
    assert report == (
        "mm: grid (2, 2, 1), block (32, 8, 1), 131104 dynamic shared bytes, 1 tensor maps; "
        "90 registers a thread; 256 threads a block at most; 0 static shared bytes; "
        "49152 dynamic shared bytes allowed"
    )


class _Launchable(_Function):
    def __init__(self, primitive: bool) -> None:
        self.launched: list = []
        if primitive:
            self._launch_kernel = lambda *call: self.launched.append(("primitive", *call))

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0) -> None:
        self.launched.append(
            ("prepared", grid, block, struct.pack(self.format, *args), shared_size)
        )


def test_a_call_launches_the_packed_parameters_through_pycudas_primitive_or_prepared_call():
    maps = [bytes([5]) * TENSOR_MAP_BYTES]
    launch = Launch("k", (2, 2), (32, 8), 131104, (A_MAP,))
    expected = pack_params([16, 32, 48], maps)
    fast = _Launchable(primitive=True)
    gpu_call._Call(fast, launch, [16, 32, 48], maps)("stream")
    assert fast.launched == [("primitive", (2, 2, 1), (32, 8, 1), expected, 131104, "stream")]
    slow = _Launchable(primitive=False)
    slow.prepare(gpu_call.param_format(3, 1))
    gpu_call._Call(slow, launch, [16, 32, 48], maps)()
    assert slow.launched == [("prepared", (2, 2, 1), (32, 8, 1), expected, 131104)]


def test_a_workspace_temporary_is_zeroed_when_allocated():
    """A single-pass kernel's arrival counter (`ArgSpec.zeroed`) starts at zero; other
    temporaries are left as allocated."""
    from tests.measure.test_zeroed_args import ARGS, RecordingDriver

    drv = RecordingDriver()
    scratch, counter = gpu_call._temporary(drv, ARGS[2]), gpu_call._temporary(drv, ARGS[3])
    assert drv.memsets == {counter: 0} and scratch not in drv.memsets
