"""The cycle collector kept to the young objects while the search's per-candidate work runs, and
kept out of one candidate's lowering altogether.

Lowering a candidate makes and drops tens of thousands of small objects (expression nodes,
affine forms, memo dicts), so the collector runs often, and each of its full collections walks
every object the process holds: the task, the sketches, the cost model, the feature cache. Those
live for the whole search, and walking them again finds nothing to free. `young_objects_only`
moves everything alive when it starts into the collector's permanent generation (`gc.freeze`)
and back when it ends (`gc.unfreeze`): the collections in between walk only what was made
since, and garbage among the older objects waits for the first collection after it. What the
work computes does not change, only how much the collector walks. (The collection thresholds
stay as they are: collecting the youngest generation less often costs more, as each collection
then meets more of a lowering's live objects and carries them to the older generations.)

Inside one candidate's lowering the collector finds next to nothing, and what it walks is the
lowering's own live trees, over and over, each young collection carrying them a generation on.
`collector_paused` keeps it out of such a block and collects the youngest generation once when
it ends, which frees the reference cycles the block left (lowering avoids making them: a closure
that calls itself is one, and keeps what it holds alive until then). Nothing is collected later
than at the end of one candidate's work, so memory stays bounded by what one candidate makes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# whether a `young_objects_only` block has frozen the objects and not unfrozen them yet: an
# enclosing block is known without asking `gc.get_freeze_count`, which counts the frozen
# objects one by one (the search's whole heap, at every chunk of candidates run in-process)
_frozen_by_block = False


@contextmanager
def young_objects_only() -> Iterator[None]:
    """Within the block, the cycle collector walks only the objects made inside it. A no-op
    where objects are frozen already (an enclosing block, or a caller's own `gc.freeze`,
    which is left as it was)."""
    global _frozen_by_block
    if _frozen_by_block or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    _frozen_by_block = True
    try:
        yield
    finally:
        _frozen_by_block = False
        gc.unfreeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Within the block the cycle collector does not run; at its end one collection of the
    youngest generation (everything made inside) frees the reference cycles the block left. A
    no-op where the collector is off already (an enclosing block, or a caller's
    `gc.disable`, which is left as it was)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)
