"""The passes from the analysis program to the device program (`passes.DEVICE_PASSES`).

`lower(state)` returns the analysis program: its indices keep the per-axis form bound inference
gives them, which the feature extractor reads. The device program is what the CUDA printer
prints and what `BuiltKernel.run_cpu` runs on the interpreter; `device_program` makes it. The
pass list itself lives with the lowering passes in `passes.py`; this module keeps the names
callers import.
"""

from __future__ import annotations

from autosched.lower.index_folding import fold_index_digits
from autosched.lower.kernel_ranges import kernel_bounds
from autosched.lower.passes import DEVICE_PASSES, device_program

__all__ = ["DEVICE_PASSES", "device_program", "fold_index_digits", "kernel_bounds"]
