"""Where a kernel's shared buffers live.

A kernel whose shared buffers fit in the 48 KB a block may declare statically prints them as
`__shared__` arrays. Above that, up to the device's opt-in limit, it declares one
`extern __shared__` byte array (its dynamic shared memory) and each buffer as a typed pointer
into it at an aligned offset (`shared_layout`: 16 bytes, 32 for wmma tiles), which indexes as
the array did; `dynamic_shared_bytes(kernel)` is the size its launch must ask for (`build`
puts it in the kernel's `Launch`). A kernel whose buffers share bytes (`Kernel.shared_aliases`)
always declares them in dynamic shared memory, each alias's hosts packed first from offset 0
and its tile at the first host's offset.
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
    """The kernel's shared buffers packed: (byte offset by buffer id, the largest alignment,
    the total bytes). Each alias's hosts come first, in order, its tile at the first host's
    offset, the next buffer past the end of both; then the other buffers in allocation order.
    A buffer that warp statements access starts at a multiple of wmma's 32 bytes, one that
    wgmmas read at its swizzle pattern's alignment (1024 bytes for the 128-byte swizzle), every
    other one at a multiple of 16."""
    wmma, wgmma = warp_memory(kernel), shared_alignment(kernel)

    def alignment(b: ir.Buffer) -> int:
        a = SHARED_ALIGN if id(b) in wmma else SHARED_ALIGN_BYTES
        return max(a, wgmma.get(id(b), 0))

    offsets: dict[int, int] = {}
    align, end = SHARED_ALIGN_BYTES, 0

    def place(b: ir.Buffer, a: int) -> None:
        nonlocal end, align
        offsets[id(b)] = end = -(-end // a) * a
        end += b.size * BYTES[b.dtype]
        align = max(align, a)

    for alias in kernel.shared_aliases:
        both = max(alignment(alias.hosts[0]), alignment(alias.tile))  # powers of two
        end = start = -(-end // both) * both
        for host in alias.hosts:
            place(host, alignment(host))
        hosts_end, end = end, start
        place(alias.tile, alignment(alias.tile))
        end = max(end, hosts_end)
    for b in kernel.allocs:
        if b.scope == "shared" and id(b) not in offsets:
            place(b, alignment(b))
    return offsets, align, end


def dynamic_shared_bytes(kernel: ir.Kernel) -> int:
    """The dynamic shared memory the kernel's launch needs: 0 for a kernel whose shared buffers
    fit in `STATIC_SHARED_LIMIT` and share no bytes (printed as static arrays), else all of
    them, aligned."""
    total = shared_layout(kernel)[2]
    return total if total > STATIC_SHARED_LIMIT or kernel.shared_aliases else 0
