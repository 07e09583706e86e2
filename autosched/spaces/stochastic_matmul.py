"""The MLC course's stochastic matmul schedule, written for autosched's matmul on the GPU.

`topi.matmul` gives one stage `T_matmul(i, j) += A[i, k] * B[k, j]`. The schedule caches the
output in registers, tiles i and j in three levels with sampled perfect tiles (blocks, threads,
per-thread), binds the fused outer tiles to blockIdx.x and the middle ones to threadIdx.x,
computes the local cache at the thread loop with a sampled split of k, unrolls the inner k loop
and samples the auto-unroll depth. Every random choice is a sampler, so a trace's decisions are
the whole of the difference between two schedules of this space.
"""

from __future__ import annotations

from autosched.spaces.stochastic import Schedule

UNROLL_STEPS = (0, 16, 64, 512)


def stochastic_matmul(sch: Schedule, block: str = "T_matmul", max_inner: int = 4) -> None:
    """Schedule the matmul stage `block` of `sch` with sampled tile sizes."""
    c = sch.get_block(block)
    c_local = sch.cache_write(c, "local")
    i, j = sch.get_loops(c)
    i0, i1, i2 = sch.split(i, sch.sample_perfect_tile(i, n=3, max_innermost_factor=max_inner))
    j0, j1, j2 = sch.split(j, sch.sample_perfect_tile(j, n=3, max_innermost_factor=max_inner))
    sch.reorder(i0, j0, i1, j1, i2, j2)
    bx = sch.fuse(i0, j0)
    sch.bind(bx, "blockIdx.x")
    tx = sch.fuse(i1, j1)
    sch.bind(tx, "threadIdx.x")
    sch.compute_at(c_local, tx)
    ci, cj, ck = sch.get_loops(c_local)
    k0, k1 = sch.split(ck, sch.sample_perfect_tile(ck, n=2, max_innermost_factor=8))
    sch.reorder(k0, k1, ci, cj)
    sch.unroll(k1)
    steps = sch.sample_categorical(list(UNROLL_STEPS), [0.25] * len(UNROLL_STEPS))
    sch.pragma(bx, "auto_unroll_max_step", steps)
