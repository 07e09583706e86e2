"""Thread-private caches: a `local` stage whose own iterators bind a threadIdx tag.

A local stage computed inside a thread loop holds what that one thread computes, and bound
inference sizes it so. A local cache computed *outside* the thread loops (at a block's row loop)
whose own loops are bound to threadIdx is the other case, TVM's `local` cache at a thread loop:
the stage as a whole computes its region (a row, or a cluster block's part of it), each element
by the thread whose index its thread-bound iterators take there, and each thread keeps only the
elements it computed. Its storage is therefore the stage's *non-thread* iterators alone: an
element at region-relative coordinates `c` sits in slot `slot(c)` of the buffer of thread
`owners(c)`, both read off the stage's split relations by inverting them (each leaf iterator is
a mixed-radix digit of its root axis). A row cut [rest, threads, lanes] gives each thread
rest x lanes slots, indexed rest * lanes + lane.

Its readers must read only the elements their own thread holds: for every load of the cache,
`owners(c)` of the reader's coordinates must simplify to the reader's own thread index, which
holds when the reader cuts the row as the cache does (the reductions and the output of a
normalisation follow the output's split; lower/planning.py `plan_thread_private` checks it and
refuses the state otherwise). With every loop over the slots unrolled (`unrolling.py`
`unroll_register_indices`), the slots are constant indices and the cache stays in registers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.ir import I32, int32
from autosched.schedule.stage import SplitRel, Stage
from autosched.te.expr import BinOp, Expr


@dataclass(frozen=True)
class PrivateLayout:
    """Where a thread-private stage keeps each element: its leaf iterators in loop order, as
    (name, extent, threadIdx tag or None), and for each iterator of the stage (leaves, roots
    and between) how its value follows from the root coordinates (`_values`)."""

    stage: Stage
    ext: tuple[tuple[str, int], ...]  # every iterator's extent (as StageInfo.ext)
    leaves: tuple[tuple[str, int, str | None], ...]

    @property
    def size(self) -> int:
        """Slots per thread: the product of the non-thread leaves' extents."""
        return math.prod(e for _, e, tag in self.leaves if tag is None)

    def _values(self, coords: list[Expr]) -> dict[str, Expr]:
        """Every iterator's value at region-relative root coordinates `coords`: the split
        relations walked forwards, each child the digit of its parent (`leaf_values` in
        bound_inference.py walks them backwards)."""
        ext = dict(self.ext)
        val: dict[str, Expr] = {
            it.name: c for it, c in zip(self.stage.root_iters, coords, strict=True)
        }
        for rel in self.stage.relations:
            if not isinstance(rel, SplitRel):
                raise LoweringError(
                    f"stage {self.stage.name!r}: a thread-private cache's iterators must come "
                    "from splits alone (no fuse)"
                )
            parent, stride = val[rel.parent], 1
            for k in range(len(rel.children) - 1, -1, -1):
                c = rel.children[k]
                part = BinOp("floordiv", parent, int32(stride), I32) if stride > 1 else parent
                val[c] = BinOp("floormod", part, int32(ext[c]), I32) if k > 0 else part
                if rel.inner_to_outer:
                    stride *= rel.lengths[k - 1] if k > 0 else 1
                else:
                    stride *= ext[c]
        return val

    def slot(self, coords: list[Expr]) -> Expr:
        """The slot of the element at region-relative `coords` in its owner's buffer."""
        val = self._values(coords)
        flat: Expr = int32(0)
        for name, extent, tag in self.leaves:
            if tag is None:
                flat = BinOp("+", BinOp("*", flat, int32(extent), I32), val[name], I32)
        return flat

    def owners(self, coords: list[Expr]) -> dict[str, Expr]:
        """The thread index, per threadIdx tag, of the thread that holds the element at
        region-relative `coords`."""
        val = self._values(coords)
        return {tag: val[name] for name, _, tag in self.leaves if tag is not None}


def is_thread_private(stage: Stage, scope: str) -> bool:
    """Whether a stage of `scope` is a thread-private cache: a local `cache_read` computed at
    a loop, its own iterators bound to a threadIdx tag."""
    return (
        scope == "local"
        and stage.origin == "cache_read"
        and stage.attach is not None
        and any(it.annotation in ir.THREAD_TAGS for it in stage.iters)
    )


def private_layout(stage: Stage, ext: dict[str, int]) -> PrivateLayout:
    """The layout of thread-private `stage` whose iterators have extents `ext`."""
    leaves = tuple(
        (it.name, ext[it.name], it.annotation if it.annotation in ir.THREAD_TAGS else None)
        for it in stage.iters
    )
    return PrivateLayout(stage, tuple(ext.items()), leaves)


__all__ = ["PrivateLayout", "is_thread_private", "private_layout"]
