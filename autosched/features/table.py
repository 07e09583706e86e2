"""The feature table: every feature is declared here once, as (name, how to compute it from a
StoreInfo, group). The vector layout and FEATURE_NAMES both come from FEATURES.

Counts are totals over every execution of the statement (per execution times the product of
all enclosing loops and thread extents), as in Ansor. All values are scaled by log2(1 + x) when
the matrix is built.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from autosched.features.analysis import (
    CURVE_POINTS,
    N_BUFFERS,
    READ,
    REUSE_LOOP,
    REUSE_NONE,
    REUSE_SERIAL,
    RW,
    WRITE,
    BufferInfo,
    StoreInfo,
)
from autosched.features.exprs import OP_KINDS
from autosched.lower.ir import BLOCK_TAGS, THREAD_TAGS


@dataclass(frozen=True)
class Feature:
    name: str
    get: Callable[[StoreInfo], float]
    group: str


def _buffer_fields() -> list[tuple[str, Callable[[BufferInfo], float]]]:
    """Ansor's 18 per-buffer values, plus the memory scope (2) and the threadIdx.x stride."""
    return [
        ("acc_read", lambda b: b.acc_type == READ),
        ("acc_write", lambda b: b.acc_type == WRITE),
        ("acc_rw", lambda b: b.acc_type == RW),
        ("scope_shared", lambda b: b.scope == "shared"),
        ("scope_local", lambda b: b.scope == "local"),
        ("bytes", lambda b: b.bytes),  # accessed bytes over all executions
        ("unique_bytes", lambda b: b.unique_bytes),  # distinct bytes touched by the whole nest
        ("lines", lambda b: b.lines),  # cache lines accessed (innermost moving loop's stride)
        ("unique_lines", lambda b: b.unique_lines),
        ("reuse_loop", lambda b: b.reuse_type == REUSE_LOOP),  # a loop re-reads the data
        ("reuse_serial", lambda b: b.reuse_type == REUSE_SERIAL),  # other stores in the loop
        ("reuse_none", lambda b: b.reuse_type == REUSE_NONE),
        ("reuse_dis_iter", lambda b: b.reuse_dis_iter),  # iterations between reuses
        ("reuse_dis_bytes", lambda b: b.reuse_dis_bytes),  # bytes touched between reuses
        ("reuse_ct", lambda b: b.reuse_ct),
        ("bytes_d_reuse_ct", lambda b: b.bytes / b.ratio),
        ("unique_bytes_d_reuse_ct", lambda b: b.unique_bytes / b.ratio),
        ("lines_d_reuse_ct", lambda b: b.lines / b.ratio),
        ("unique_lines_d_reuse_ct", lambda b: b.unique_lines / b.ratio),
        ("stride", lambda b: b.stride),  # elements per step of the innermost loop moving over it
        ("tx_stride", lambda b: b.tx_stride),  # elements per threadIdx.x step (coalescing)
    ]


def _per_buffer(k: int, fn: Callable[[BufferInfo], float]) -> Callable[[StoreInfo], float]:
    def get(s: StoreInfo) -> float:
        return fn(s.buffers[k]) if k < len(s.buffers) else 0.0

    return get


def _alloc_inner(s: StoreInfo) -> float:
    return s.outer_prod / s.alloc_outer_prod if s.alloc_outer_prod else 0.0


def _alloc_prod(s: StoreInfo) -> float:
    return s.buffer.size * s.alloc_outer_prod if s.alloc_outer_prod else 0.0


def _curve(i: int) -> Callable[[StoreInfo], float]:
    return lambda s: s.curve[i]


def _op_count(k: int) -> Callable[[StoreInfo], float]:
    return lambda s: s.ops[k]


def _annotation(kind: str, field: str) -> Callable[[StoreInfo], float]:
    """`field` of the store's `kind` Annotation (kind: 'vec' or 'unroll')."""
    return operator.attrgetter(f"{kind}.{field}")


def _thread_extent(tag: str) -> Callable[[StoreInfo], float]:
    return lambda s: s.threads[tag]


def _build() -> list[Feature]:
    f: list[Feature] = []

    def add(group: str, name: str, get: Callable[[StoreInfo], float]) -> None:
        f.append(Feature(name, get, group))

    # Group 1: computation (counts by kind over all executions).
    for k, kind in enumerate(OP_KINDS):
        add("compute", kind, _op_count(k))
    # Group 1: loop annotations around the statement.
    for ann in ("vec", "unroll"):
        add("annotation", f"{ann}_num", _annotation(ann, "num"))
        add("annotation", f"{ann}_prod", _annotation(ann, "prod"))
        add("annotation", f"{ann}_len", _annotation(ann, "length"))  # the innermost one's
        add("annotation", f"{ann}_inner_loops", _annotation(ann, "inner_loops"))
        add("annotation", f"{ann}_spatial", _annotation(ann, "spatial"))
    # Group 1: GPU thread binding.
    for tag in BLOCK_TAGS + THREAD_TAGS:
        add("gpu", tag.replace(".", "_") + "_len", _thread_extent(tag))
    add("gpu", "vthread_len", lambda s: s.vthread)
    # Group 2: buffer accesses, the N_BUFFERS buffers with most lines (then bytes) first.
    for k in range(N_BUFFERS):
        for name, fn in _buffer_fields():
            add("buffer", f"B{k}.{name}", _per_buffer(k, fn))
    # Group 3: arithmetic intensity curve.
    for i in range(CURVE_POINTS):
        add("intensity", f"arith_intensity_curve_{i}", _curve(i))
    # Group 4: allocation of the stored buffer (zeros for a global buffer) and of the kernel.
    add("allocation", "alloc_bytes", lambda s: s.alloc_bytes)
    add("allocation", "alloc_outer_prod", lambda s: s.alloc_outer_prod)  # number of instances
    add("allocation", "alloc_inner_prod", _alloc_inner)  # executions per instance
    add("allocation", "alloc_prod", _alloc_prod)  # elements over all instances
    add("allocation", "alloc_shared", lambda s: s.alloc_scope == "shared")
    add("allocation", "alloc_local", lambda s: s.alloc_scope == "local")
    add("allocation", "kernel_shared_bytes", lambda s: s.kernel_shared_bytes)  # per block
    add("allocation", "kernel_local_bytes", lambda s: s.kernel_local_bytes)  # per thread
    # Group 5: outer scope.
    add("outer", "outer_prod", lambda s: s.outer_prod)  # executions (loops x threads)
    add("outer", "num_loops", lambda s: s.num_loops)  # enclosing loops incl. thread indices
    add("outer", "unrolled_steps", lambda s: s.unrolled_steps)  # size of the unrolled nest
    # Group 6: who issues the statement (after Ansor's groups, so that a model trained on the
    # older table reads its columns by name): a cp.async copy, a TMA box copy (the copy
    # engine's), a statement of a kernel whose TMA pipeline a producer warpgroup feeds (the
    # analysis program keeps the pipeline it replaces, so the walk reads the kernel's mark).
    add("issue", "async_copy", lambda s: s.async_copy)
    add("issue", "copy_engine", lambda s: s.copy_engine)
    add("issue", "warp_specialized", lambda s: s.warp_specialized)
    return f


FEATURES: list[Feature] = _build()
FEATURE_NAMES: list[str] = [f.name for f in FEATURES]

# The fast path of `feature_row`: the same getters, with the buffer block read field by field
# from each BufferInfo instead of through FEATURES' per-buffer closures.
_BUF_START = FEATURE_NAMES.index("B0." + _buffer_fields()[0][0])
_BUF_FNS = tuple(fn for _, fn in _buffer_fields())
_BUF_END = _BUF_START + N_BUFFERS * len(_BUF_FNS)
_HEAD = tuple(f.get for f in FEATURES[:_BUF_START])
_TAIL = tuple(f.get for f in FEATURES[_BUF_END:])
_NO_BUFFER = [0.0] * len(_BUF_FNS)
assert all(f.group == "buffer" for f in FEATURES[_BUF_START:_BUF_END])


def feature_row(s: StoreInfo) -> list[float]:
    """The raw (unscaled) feature values of one statement, in FEATURES order."""
    row = [g(s) for g in _HEAD]
    bufs = s.buffers
    for k in range(N_BUFFERS):
        if k < len(bufs):
            b = bufs[k]
            row.extend([fn(b) for fn in _BUF_FNS])
        else:
            row.extend(_NO_BUFFER)
    row.extend([g(s) for g in _TAIL])
    return row


def group_slices() -> dict[str, slice]:
    """Where each group lies in the vector."""
    out: dict[str, slice] = {}
    for i, f in enumerate(FEATURES):
        s = out.get(f.group)
        out[f.group] = slice(i if s is None else s.start, i + 1)
    return out
