"""Where a kernel's shared buffers live.

A kernel whose shared buffers fit in the 48 KB a block may declare statically prints them as
`__shared__` arrays. Above that, up to the device's opt-in limit, it declares one
`extern __shared__` byte array (its dynamic shared memory) and each buffer as a typed pointer
into it at an aligned offset (`shared_layout`: 16 bytes, 32 for wmma tiles), which indexes as
the array did; `dynamic_shared_bytes(kernel)` is the size its launch must ask for (`build`
puts it in the kernel's `Launch`).
"""

from __future__ import annotations

from autosched.codegen.wgmma import shared_alignment
from autosched.codegen.wmma import SHARED_ALIGN, warp_memory
from autosched.lower import ir
from autosched.te.dtype import BYTES
from measure.hardware import HardwareParams

# The most shared memory a block may declare statically; above it a kernel's shared buffers are
# placed in its dynamic shared memory, which the launch sizes (up to the opt-in limit).
STATIC_SHARED_LIMIT = HardwareParams().max_shared_memory_per_block
SHARED_ALIGN_BYTES = 16  # of every shared buffer: the widest vector access (uint4, float4)
DYNAMIC_SHARED_NAME = "as_dynamic_shared"


def shared_layout(kernel: ir.Kernel) -> tuple[dict[int, int], int, int]:
    """The kernel's shared buffers packed in allocation order: (byte offset by buffer id, the
    largest alignment, the total bytes). A buffer that warp statements access starts at a
    multiple of wmma's 32 bytes, one that wgmmas read at its swizzle pattern's alignment (1024
    bytes for the 128-byte swizzle), every other one at a multiple of 16."""
    wmma, wgmma = warp_memory(kernel), shared_alignment(kernel)
    offsets, align, end = {}, SHARED_ALIGN_BYTES, 0
    for b in kernel.allocs:
        if b.scope != "shared":
            continue
        a = SHARED_ALIGN if id(b) in wmma else SHARED_ALIGN_BYTES
        a = max(a, wgmma.get(id(b), 0))
        offsets[id(b)] = end = -(-end // a) * a
        end += b.size * BYTES[b.dtype]
        align = max(align, a)
    return offsets, align, end


def dynamic_shared_bytes(kernel: ir.Kernel) -> int:
    """The dynamic shared memory the kernel's launch needs: 0 for a kernel whose shared buffers
    fit in `STATIC_SHARED_LIMIT` (printed as static arrays), else all of them, aligned."""
    total = shared_layout(kernel)[2]
    return total if total > STATIC_SHARED_LIMIT else 0
