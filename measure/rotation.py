"""Input rotation: how many copies of a kernel's buffers a timing cycles through so that each
call finds its operands outside the L2 cache, as they are when the operator runs inside a
model. The search's runner and the benchmarks (benchmarks/torch_timing.py) rotate alike, so
that a search's record and a benchmark's re-time of it measure the same thing.
"""

from __future__ import annotations

# Rotate through at least this many bytes: 2.5x the 50 MB L2 of an H100/H200, so that with
# LRU-like replacement the next copy's lines are gone by the time it is read again. The memory
# this takes is bounded by it (plus one set), whatever the size of a set.
ROTATION_BYTES = 128 << 20
# Copies at most: only sets under 128 KB (kernels timed in a microsecond or two, where launch
# cost dominates anyway) stay partly L2-warm at this cap.
MAX_COPIES = 1024


def rotation_copies(bytes_per_set: int, rotate_bytes: int = ROTATION_BYTES) -> int:
    """Copies of a buffer set of `bytes_per_set` to cycle through: enough to span
    `rotate_bytes`, at most MAX_COPIES; 1 (the same buffers every call) when `rotate_bytes` is
    0."""
    if rotate_bytes <= 0:
        return 1
    return max(1, min(MAX_COPIES, -(-rotate_bytes // max(1, bytes_per_set))))
