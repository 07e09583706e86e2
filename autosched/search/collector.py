"""The cycle collector kept to the young objects while the search's per-candidate work runs.

Lowering a candidate makes and drops tens of thousands of small objects (expression nodes,
affine forms, memo dicts), so the collector runs often, and each of its full collections walks
every object the process holds: the task, the sketches, the cost model, the feature cache. Those
live for the whole search, and walking them again finds nothing to free. `young_objects_only`
moves everything alive when it starts into the collector's permanent generation (`gc.freeze`)
and back when it ends (`gc.unfreeze`): the collections in between walk only what was made
since, and garbage among the older objects waits for the first collection after it. The
youngest generation is also collected less often (`YOUNG_THRESHOLD`): most of a candidate's
objects die by reference count before a collection would see them, and each collection that
meets a lowering half done walks (and keeps for the next generation) everything it holds. What
the work computes does not change, only how much the collector walks.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# allocations (less deallocations) between two collections of the youngest generation inside
# `young_objects_only` (Python's default: 700)
YOUNG_THRESHOLD = 10_000


@contextmanager
def young_objects_only() -> Iterator[None]:
    """Within the block, the cycle collector walks only the objects made inside it, and its
    youngest generation at most every `YOUNG_THRESHOLD` allocations; both are restored after.
    A no-op where objects are frozen already (an enclosing block, or a caller's own
    `gc.freeze`, which is left as it was)."""
    if gc.get_freeze_count():
        yield
        return
    thresholds = gc.get_threshold()
    gc.freeze()
    # (a threshold of 0, automatic collection turned off, stays off)
    gc.set_threshold(thresholds[0] and max(YOUNG_THRESHOLD, thresholds[0]), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
