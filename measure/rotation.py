"""Input rotation: how many copies of a kernel's buffers a timing cycles through so that each
call finds its operands outside the L2 cache, as they are when the operator runs inside a
model, and (for the runner's worker) where the copies live. The search's runner and the
benchmarks (benchmarks/timing.py) rotate alike, so that a search's record and a
benchmark's re-time of it measure the same thing.
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


SET_ALIGN = 256  # bytes: each buffer of a rotated set starts as aligned as cuMemAlloc's


def _aligned(nbytes: int) -> int:
    return -(-max(1, nbytes) // SET_ALIGN) * SET_ALIGN


def set_pointers(sizes: list[int], block, count: int) -> list[list[int]]:
    """The buffer addresses of `count` sets of buffers of `sizes` bytes laid out back to back
    from device address `block`, each buffer SET_ALIGN-aligned."""
    base, offsets, at = int(block), [], 0
    for size in sizes:
        offsets.append(at)
        at += _aligned(size)
    return [[base + k * at + o for o in offsets] for k in range(count)]


def copy_sets(drv, sizes: list[int], buffers: list, count: int):
    """One device allocation (pycuda driver `drv`) holding `count` copies of `buffers` (of
    `sizes` bytes), laid out as `set_pointers` says: the first set copied buffer by buffer, then
    the filled sets copied onto the next ones, doubling, so that hundreds of small sets take a
    few copies. The caller frees it."""
    stride = sum(_aligned(size) for size in sizes)
    block = drv.mem_alloc(count * stride)
    base = int(block)
    for size, buf, ptr in zip(sizes, buffers, set_pointers(sizes, block, 1)[0], strict=True):
        if size:
            drv.memcpy_dtod(ptr, buf, size)
    filled = 1
    while filled < count:
        more = min(filled, count - filled)
        drv.memcpy_dtod(base + filled * stride, base, more * stride)
        filled += more
    return block
