"""TVM's `time_evaluator` for a BuiltKernel: time its launches on the GPU in this process.

    evaluator = kernel.time_evaluator(min_repeat_ms=500)
    print(np.median(evaluator(*arrays).results) * 1000, "ms")

Each repeat times `number` back-to-back launches between two CUDA events, `number` raised (as
TVM does) until a repeat lasts `min_repeat_ms`; a result is seconds per launch sequence. Back to
back, a kernel of a few microseconds is timed no faster than the host can launch it; the search's
runner (measure.LocalRunner) replays CUDA graphs to avoid that.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

GOLDEN_RATIO = 1.618  # TVM's growth factor for `number` while a repeat is too short
MAX_NUMBER = 1 << 24  # a repeat never runs more launches than this


@dataclass(frozen=True)
class ProfileResult:
    """Seconds per run of the kernel: `results` one per repeat, `mean` their mean."""

    mean: float
    results: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median of `results`."""
        return statistics.median(self.results)


class _DeviceArray:
    """A device copy of a numpy array, with the `data_ptr()` that GPULauncher takes."""

    def __init__(self, drv, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        self.buffer = drv.mem_alloc(max(1, array.nbytes))
        drv.memcpy_htod(self.buffer, array)

    def data_ptr(self) -> int:
        return int(self.buffer)


class TimeEvaluator:
    """Called on the kernel's arguments (numpy arrays, copied to the GPU once, or torch CUDA
    tensors, used in place; temporaries may be omitted), returns a ProfileResult. The arrays
    are not written back: call the kernel itself for its outputs."""

    def __init__(
        self,
        kernel,
        number: int = 10,
        repeat: int = 1,
        min_repeat_ms: float = 0.0,
        cooldown_interval_ms: float = 0.0,
    ) -> None:
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be positive, got {number} and {repeat}")
        self.kernel = kernel
        self.number = number
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms
        self.cooldown_interval_ms = cooldown_interval_ms

    def __call__(self, *arrays: Any) -> ProfileResult:
        from autosched.codegen.gpu_call import new_stream

        stream = new_stream()  # also makes the device's primary context current
        import pycuda.driver as drv

        tensors = [a if hasattr(a, "data_ptr") else _DeviceArray(drv, a) for a in arrays]
        launch = self.kernel.launcher(*tensors)
        drv.Context.synchronize()  # work already queued on these buffers (torch's) ends first
        launch(stream)  # warm-up: module load, caches
        start, end = drv.Event(), drv.Event()
        results, number = [], self.number
        for i in range(self.repeat):
            if i and self.cooldown_interval_ms > 0:
                time.sleep(self.cooldown_interval_ms / 1e3)
            elapsed_ms = None
            while True:
                if elapsed_ms is not None:  # too short: run more, as TVM grows `number`
                    per_run = elapsed_ms / number
                    grown = self.min_repeat_ms / per_run + 1 if per_run > 0 else 0
                    number = min(MAX_NUMBER, int(max(grown, number * GOLDEN_RATIO, number + 1)))
                start.record(stream)
                for _ in range(number):
                    launch(stream)
                end.record(stream)
                end.synchronize()
                elapsed_ms = end.time_since(start)
                if elapsed_ms >= self.min_repeat_ms or number >= MAX_NUMBER:
                    break
            results.append(elapsed_ms / 1e3 / number)
        return ProfileResult(math.fsum(results) / len(results), tuple(results))


__all__ = ["ProfileResult", "TimeEvaluator"]
