"""Asynchronous copies from global to shared memory (`cp.async`, sm_80 and later).

A shared buffer marked `async_copy` (a double-buffered stage: `autosched.lower.double_buffer`)
is only read after a barrier that follows its stores. A store into it whose value is a plain
copy of global memory, `dst[i] = src[j]`, or a zero-filled one, `dst[i] = cond ? src[j] : 0`,
of 4, 8 or 16 bytes (a scalar, or a `vectorize` loop that `autosched.codegen.lanes` proves
contiguous and aligned) is printed as one `cp.async`: the copy proceeds while the thread goes
on, and the zero-fill form copies no byte where the condition is false (`src-size` 0). Every
barrier of such a kernel is printed after `cp.async.wait_all`, which makes the copies complete
and visible exactly where the plain stores would have been: the CPU interpreter, which runs the
stores in order, computes what the GPU computes. Below sm_80 the helpers copy synchronously.

A kernel with cp.async group statements (`ir.AsyncCommit`, `ir.AsyncWait`: a multi-stage
pipeline, `autosched.lower.double_buffer`) waits where they say instead: `commit_group` and
`wait_group N` print as such, and its barriers wait for nothing (the pipeline's wait precedes
the barrier that publishes a tile, while the newest N groups stay in flight).

A copy's shared address comes from `__cvta_generic_to_shared`, not from an inline `cvta` asm:
through the asm, ptxas at -O2 and above could let a later shared load overwrite the copy's
address register before the copy had read it (a pipelined TF32 convolution read out of bounds
and returned wrong sums on the GPU, and matched at -O1). The cluster helpers do the same.
"""

from __future__ import annotations

import math

from autosched.codegen.context import PrintContext
from autosched.codegen.lanes import lane_free_guard, vector_base
from autosched.lower import ir
from autosched.te.dtype import BYTES
from autosched.te.expr import Const, Expr, Load, Select, Var

HELPER = "cp_async"
# the copy sizes cp.async takes; 16-byte copies bypass L1 (.cg), smaller ones cannot (.ca)
COPY_BYTES = {4: "ca", 8: "ca", 16: "cg"}
WAIT = "as_cp_async_wait_all();"

HELPERS = """\
__device__ __forceinline__ unsigned as_shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
#define AS_CP_ASYNC(BYTES, LEVEL, WORD) \\
  __device__ __forceinline__ void as_cp_async_##BYTES(void* dst, const void* src, bool copy) { \\
    AS_CP_ASYNC_BODY(BYTES, LEVEL, WORD) \\
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define AS_CP_ASYNC_BODY(BYTES, LEVEL, WORD) \\
  asm volatile("cp.async." #LEVEL ".shared.global [%0], [%1], " #BYTES ", %2;\\n" \\
               :: "r"(as_shared_address(dst)), "l"(src), "r"(copy ? BYTES : 0) : "memory");
__device__ __forceinline__ void as_cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\\n" ::: "memory");
}
__device__ __forceinline__ void as_cp_async_commit() {
  asm volatile("cp.async.commit_group;\\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void as_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\\n" :: "n"(N) : "memory");
}
#else
#define AS_CP_ASYNC_BODY(BYTES, LEVEL, WORD) \\
  *reinterpret_cast<WORD*>(dst) = copy ? *reinterpret_cast<const WORD*>(src) : WORD();
__device__ __forceinline__ void as_cp_async_wait_all() {}
__device__ __forceinline__ void as_cp_async_commit() {}
template <int N> __device__ __forceinline__ void as_cp_async_wait() {}
#endif
AS_CP_ASYNC(4, ca, unsigned)
AS_CP_ASYNC(8, ca, uint2)
AS_CP_ASYNC(16, cg, uint4)
"""


def uses_async_copy(kernel: ir.Kernel) -> bool:
    """Whether the kernel has a buffer whose stores may be asynchronous."""
    return any(b.async_copy for b in kernel.allocs)


def uses_async_groups(kernel: ir.Kernel) -> bool:
    """Whether the kernel commits and waits for cp.async groups itself (then its barriers
    wait for nothing)."""
    return any(isinstance(s, ir.AsyncGroupStmt) for s in ir.iter_stmts(kernel.body))


def async_group_text(s: ir.AsyncGroupStmt) -> str:
    """The helper call of a cp.async group statement."""
    if isinstance(s, ir.AsyncWait):
        return f"as_cp_async_wait<{s.pending}>();"
    return "as_cp_async_commit();"


def _copy_source(store: ir.Store) -> tuple[Load, Expr | None] | None:
    """(the global load, the zero-fill condition or None) when `store` copies global memory of
    its own dtype into an `async_copy` buffer, else None."""
    if not store.buffer.async_copy:
        return None
    value, cond = store.value, None
    if isinstance(value, Select) and _is_plus_zero(value.f):
        value, cond = value.t, value.cond
    if not isinstance(value, Load) or value.buffer.scope != "global":
        return None
    return (value, cond) if value.buffer.dtype == store.buffer.dtype else None


def _is_plus_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0 and math.copysign(1.0, e.value) > 0


def async_copy_text(
    p: PrintContext, store: ir.Store, lane: Var | None = None, width: int = 1
) -> str | None:
    """`store` (the body of a `width`-wide vectorize loop over `lane`, or a scalar store with
    no lane) printed as one `cp.async` call; None when it is not such a copy."""
    source = _copy_source(store)
    nbytes = width * BYTES[store.buffer.dtype]
    if source is None or nbytes not in COPY_BYTES:
        return None
    load, cond = source
    dst, src = store.index, load.indices[0]
    if lane is not None:
        dst_base, src_base = vector_base(dst, lane, width), vector_base(src, lane, width)
        cond = None if cond is None else lane_free_guard(cond, lane, width)
        if dst_base is None or src_base is None or (source[1] is not None and cond is None):
            return None
        dst, src = dst_base, src_base
    ex = p.ex
    ex.helpers.add(HELPER)
    copy = "true" if cond is None else ex(cond)
    dst_at = f"&{ex.buffer_names[id(store.buffer)]}[{ex(dst)}]"
    src_at = f"&{ex.buffer_names[id(load.buffer)]}[{ex(src)}]"
    return f"as_cp_async_{nbytes}({dst_at}, {src_at}, {copy});"


__all__ = [
    "HELPER",
    "HELPERS",
    "WAIT",
    "async_copy_text",
    "async_group_text",
    "uses_async_copy",
    "uses_async_groups",
]
