"""The CUDA text of thread-block clusters (`autosched.lower.cluster_ir`), in inline PTX (sm_90):

- a cluster kernel is declared `__cluster_dims__(C, 1, 1)` after its launch bounds, and reads
  its rank once, at the top, from `%cluster_ctarank`;
- `ClusterBarrier`: `barrier.cluster.arrive.release.aligned` then
  `barrier.cluster.wait.acquire.aligned` (every thread of the cluster reaches it, so the
  aligned forms hold), after waiting for the thread's asynchronous copies where `__syncthreads`
  would (it orders the block's threads as that barrier does: `async_copy.py`);
- `ClusterLoad`: the source element's shared address (`cvta.to.shared`), mapped to the same
  address in the block of the given rank (`mapa.shared::cluster`), read with
  `ld.shared::cluster` of the element's width.
"""

from __future__ import annotations

from autosched.codegen.async_copy import HELPER as ASYNC_HELPER
from autosched.codegen.async_copy import WAIT as ASYNC_WAIT
from autosched.codegen.async_copy import uses_async_copy, uses_async_groups
from autosched.codegen.context import PrintContext, StmtTable
from autosched.errors import LoweringError
from autosched.lower import cluster_ir as ci
from autosched.te.dtype import BYTES

HELPER = "cluster"
HELPERS = """\
__device__ __forceinline__ int as_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\\n" : "=r"(r));
  return (int)r;
}
__device__ __forceinline__ void as_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\\n" ::: "memory");
}
__device__ __forceinline__ unsigned as_cluster_address(const void* p, int rank) {
  unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
template <int BYTES> struct as_cluster_word;
template <> struct as_cluster_word<2> { typedef unsigned short type; };
template <> struct as_cluster_word<4> { typedef unsigned type; };
template <> struct as_cluster_word<8> { typedef unsigned long long type; };
__device__ __forceinline__ void as_cluster_ld(unsigned a, unsigned short& w) {
  asm volatile("ld.shared::cluster.b16 %0, [%1];\\n" : "=h"(w) : "r"(a) : "memory");
}
__device__ __forceinline__ void as_cluster_ld(unsigned a, unsigned& w) {
  asm volatile("ld.shared::cluster.b32 %0, [%1];\\n" : "=r"(w) : "r"(a) : "memory");
}
__device__ __forceinline__ void as_cluster_ld(unsigned a, unsigned long long& w) {
  asm volatile("ld.shared::cluster.b64 %0, [%1];\\n" : "=l"(w) : "r"(a) : "memory");
}
template <typename T> __device__ __forceinline__ T as_cluster_load(const T* p, int rank) {
  typename as_cluster_word<sizeof(T)>::type w;
  as_cluster_ld(as_cluster_address(p, rank), w);
  return *reinterpret_cast<const T*>(&w);
}
"""
# the element widths a cluster load reads (bool and 1-byte ints are not read remotely)
LOAD_BYTES = (2, 4, 8)


class ClusterPrinter:
    """Prints a kernel's cluster attribute, rank and statements, within a PrintContext."""

    def __init__(self, p: PrintContext) -> None:
        self.p = p

    def register(self, table: StmtTable) -> None:
        table.register(ci.ClusterBarrier, self.barrier)
        table.register(ci.ClusterLoad, self.load)

    def attribute(self) -> str:
        """The kernel's cluster declaration (with a leading space), or "" without clusters."""
        c = self.p.k.cluster
        return f" __cluster_dims__({c}, 1, 1)" if c > 1 else ""

    def prologue(self, depth: int) -> None:
        """Declare the rank variable at the top of a cluster kernel."""
        if self.p.k.cluster == 1:
            return
        self.p.ex.helpers.add(HELPER)
        name = self.p.ex.names[id(ci.CLUSTER_RANK)] = self.p.fresh(ci.CLUSTER_RANK.name)
        self.p.emit(depth, f"const int {name} = as_cluster_rank();")

    def barrier(self, s: ci.ClusterBarrier, d: int) -> None:
        if uses_async_copy(self.p.k) and not uses_async_groups(self.p.k):
            self.p.ex.helpers.add(ASYNC_HELPER)
            self.p.emit(d, ASYNC_WAIT)
        self.p.ex.helpers.add(HELPER)
        self.p.emit(d, "as_cluster_sync();")

    def load(self, s: ci.ClusterLoad, d: int) -> None:
        p, ex = self.p, self.p.ex
        if BYTES[s.src.dtype] not in LOAD_BYTES:
            width = f"{s.src.dtype} ({s.src.name})"
            raise LoweringError(f"a cluster load of {width}: not 2, 4 or 8 bytes wide")
        ex.helpers.add(HELPER)
        src = f"&{ex.buffer_names[id(s.src)]}[{ex(s.src_index)}]"
        dst = f"{ex.buffer_names[id(s.dst)]}[{ex(s.dst_index)}]"
        p.emit(d, f"{dst} = as_cluster_load({src}, {ex(s.rank)});")


__all__ = ["HELPER", "HELPERS", "ClusterPrinter"]
