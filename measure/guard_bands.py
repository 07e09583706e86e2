"""Device buffers with guard bands: a candidate's arguments are allocated with `GUARD_BYTES` of a
known pattern before and after each, so that a kernel writing past either end of an argument
is caught where it happens.

Why: an out-of-bounds store of a wrong schedule (a tail tile stored whole, an index off by a
tile) lands in whatever lies next in device memory. Its own outputs can still match the
reference, so the output check alone passes it, and its stray bytes spoil another allocation:
the pristine inputs the worker keeps for the next candidates, which then fail for it. Stores
just past an end are the common case; the bands catch those at the cost of a few small copies
a candidate. Writes further away are caught later, by the pristine copy's comparison.
"""

from __future__ import annotations

import numpy as np

GUARD_BYTES = 4096  # a multiple of any alignment a kernel or TMA asks of an argument's address
PATTERN = 0xA5  # neither zero nor the output poison (0xFF), so that neither hides a write


class GuardedBuffer:
    """`nbytes` of device memory (pycuda driver `drv`) between two guard bands; `int()` is the
    address a kernel gets."""

    def __init__(self, drv, nbytes: int) -> None:
        self.nbytes = nbytes
        self.allocation = drv.mem_alloc(nbytes + 2 * GUARD_BYTES)
        self.address = int(self.allocation) + GUARD_BYTES
        drv.memset_d8(int(self.allocation), PATTERN, GUARD_BYTES)
        drv.memset_d8(self.address + nbytes, PATTERN, GUARD_BYTES)

    def __int__(self) -> int:
        return self.address

    def overwritten(self, drv) -> str | None:
        """Which band a kernel wrote into ("before", "after"), or None when both are intact."""
        for side, start in (
            ("before", int(self.allocation)),
            ("after", self.address + self.nbytes),
        ):
            band = np.empty(GUARD_BYTES, np.uint8)
            drv.memcpy_dtoh(band, start)
            if (band != PATTERN).any():
                return side
        return None

    def free(self) -> None:
        self.allocation.free()


def stray_writes(drv, names: list[str], buffers: list[GuardedBuffer]) -> str | None:
    """One line naming the arguments whose guard bands were written, or None."""
    hit = [
        f"{name} ({side})"
        for name, b in zip(names, buffers, strict=True)
        if (side := b.overwritten(drv))
    ]
    if not hit:
        return None
    return (
        f"writes out of bounds: the {GUARD_BYTES} bytes around {', '.join(hit)} changed "
        "(a store outside its argument)"
    )
