"""Program features for the cost model: one fixed-length float32 vector per buffer-store
statement (Store or AllReduce) of a lowered Program, following the Ansor paper's groups.

    feats = extract_features(lower(state))           # (statements, len(FEATURE_NAMES))
    feats = state_features(state)                    # the same, lowered here (None if it fails)

Rows are per statement, in program order (a reduction's init and update are two rows; Ansor
keys rows by buffer and lets the update overwrite the init). The features of many states in
worker processes: `search.workers.features_for_states`.

Layout (161 values; Ansor has 164) — every name is in FEATURE_NAMES, declared once in table.py:

- compute (15): float mad/addsub/mul/divmod/cmp/math, the same for int, bool ops, selects,
  casts; totals over all executions of the statement. Ansor's float/int "other func" counts
  are left out (the IR has only math calls); casts are added.
- annotation (10): for vectorize and unroll loops around the statement: number, product of
  extents, extent of the innermost, loops inside the innermost, whether its variable indexes
  the stored buffer (spatial). Ansor's parallel group and its position one-hots (which Ansor
  fills with one constant) are left out: the GPU IR has no parallel loops.
- gpu (7): blockIdx.x/y/z, threadIdx.x/y/z extents, vthread (the kernel's `vthread`: product
  of the vthread extents lowering injected; the statements it replicated per virtual thread are
  rows of their own).
- buffer (5 x 21): for the 5 buffers with most cache lines (then bytes): access kind one-hot
  (read/write/rw), scope one-hot (shared/local; global is neither), bytes, unique bytes, lines,
  unique lines, reuse type one-hot (loop/serial/none), reuse distance in iterations and bytes,
  reuse count, bytes/lines divided by the reuse count, stride of the innermost loop moving over
  the buffer, stride along threadIdx.x. Missing buffers are zeros.
- intensity (10): float ops / touched bytes, sampled along the loop nest (Ansor's curve).
- allocation (8): the stored buffer's bytes, instances, executions per instance, elements over
  all instances, shared/local one-hot; the kernel's shared bytes per block and local bytes per
  thread.
- outer (3): product of the enclosing loop and thread extents, number of those loops, and the
  size of the outermost enclosing unrolled nest (stores it runs), which stands in for Ansor's
  auto_unroll_max_step.
- issue (3): who issues the statement, which the groups above read alike: a cp.async copy (a
  store into a buffer that cp.async fills), a TMA box copy (the copy engine's; walked as the
  cooperative copy it replaces, `features/tma.py`), and a statement of a kernel whose TMA
  pipeline a producer warpgroup feeds on the device (the kernel's `warp_specialized` mark).
  A model trained on the table without them reads its columns by name
  (`costmodel.pretrained.ColumnsByName`).

Counts, sizes and strides are in elements or bytes as named; the loop stack includes the
launch's block and thread indices as the outermost loops (Ansor's fake thread loops), so counts
are totals over the whole launch. Cache lines are CACHE_LINE_BYTES = 128. Every value is
>= 0 and scaled by log2(1 + x).
"""

from __future__ import annotations

from autosched.features.analysis import CACHE_LINE_BYTES, N_BUFFERS
from autosched.features.extract import N_FEATURES, extract_features, state_features
from autosched.features.table import FEATURE_NAMES, FEATURES, group_slices

__all__ = [
    "CACHE_LINE_BYTES",
    "FEATURES",
    "FEATURE_NAMES",
    "N_BUFFERS",
    "N_FEATURES",
    "extract_features",
    "group_slices",
    "state_features",
]
