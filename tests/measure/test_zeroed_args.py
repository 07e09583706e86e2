"""Workspace arguments (`ArgSpec.zeroed`: a single-pass kernel's arrival counter, which must
hold zeros at its first launch and which the kernel leaves zeroed): the spec round-trips, and
the measure worker fills them with zeros where it poisons other scratch buffers
(tests/codegen/test_gpu_call.py: `gpu_call` as well)."""

from __future__ import annotations

import numpy as np

from measure import ArgSpec
from measure._worker import Worker
from measure.reference import Reference


class RecordingDriver:
    """The driver calls `_upload` and `_temporary` make: memsets recorded by address."""

    def __init__(self) -> None:
        self.memsets: dict[int, int] = {}
        self.next = 1 << 20

    def mem_alloc(self, n: int) -> int:
        self.next += n + 256
        return self.next

    def memset_d8(self, dst, value: int, n: int) -> None:
        self.memsets[int(dst)] = value

    def memcpy_htod(self, dst, src) -> None:
        pass

    def memcpy_dtod(self, dst, src, n) -> None:
        pass


ARGS = [
    ArgSpec("x", (4,), "float32"),
    ArgSpec("y", (1,), "float32", is_output=True),
    ArgSpec("partials", (8,), "float32"),
    ArgSpec("arrivals", (1,), "int32", zeroed=True),
]


def test_a_zeroed_spec_round_trips_and_old_specs_read_as_not_zeroed():
    for spec in ARGS:
        assert ArgSpec.from_dict(spec.to_dict()) == spec
    old = {"name": "t", "shape": [2], "dtype": "float32", "is_output": False}
    assert not ArgSpec.from_dict(old).zeroed


def test_the_worker_zeroes_workspaces_and_poisons_other_scratch_buffers():
    worker = Worker.__new__(Worker)  # only what `_upload` reads
    worker.drv, worker.pristine = RecordingDriver(), {}
    buffers = [1000, 2000, 3000, 4000]
    reference = Reference({"x": np.zeros(4, np.float32)}, {"y": np.zeros(1, np.float32)})
    worker._upload(ARGS, buffers, reference, seed=0, ref_id="r")
    assert worker.drv.memsets == {3000: 0xFF, 4000: 0}
