"""The shared memory a kernel allocates where some buffers are laid over others' bytes
(`ir.SharedAlias`, recorded by lower/shared_alias.py where it proves the live ranges apart):
a leaf module, as ir imports it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from autosched.te.dtype import BYTES


class Buffer(Protocol):
    """What the byte count reads of an `ir.Buffer` (named here, not imported: ir imports
    this module)."""

    name: str
    dtype: str
    scope: str

    @property
    def size(self) -> int: ...


def shared_bytes(
    allocs: Sequence[Buffer], overlays: Sequence[tuple[Buffer, Sequence[Buffer]]]
) -> int:
    """Bytes of shared memory of a kernel allocating `allocs`: each shared buffer once, and
    each (tile, hosts) overlay the larger of the tile and its hosts (they share those bytes)."""

    def nbytes(b: Buffer) -> int:
        return b.size * BYTES[b.dtype]

    overlaid = {id(b) for tile, hosts in overlays for b in (tile, *hosts)}
    alone = sum(nbytes(b) for b in allocs if b.scope == "shared" and id(b) not in overlaid)
    return alone + sum(max(nbytes(tile), sum(map(nbytes, hosts))) for tile, hosts in overlays)
