"""A hand-built thread-block cluster program for the tests: the softmax of each row of X
(rows x n, float32) into Y, each row split over a cluster of C blocks.

Block (rank, row) of the grid (C, rows) holds its n / C elements of the row in registers (read
once), reduces its partial maximum over its threads into a shared scalar, and after a cluster
barrier folds the C partial maxima by distributed-shared-memory reads; then the same for the
partial sums of exp(x - max); then it normalises its part. A last cluster barrier keeps every
block's shared memory alive until the others have read it.

The keyword switches build the faulty variants the tests expect to be caught.
"""

from __future__ import annotations

import numpy as np

from autosched.lower import cluster_ir as ci
from autosched.lower import ir
from autosched.te.expr import Call, Const, Load, Var, binary

TX, BY = ir.THREAD_VARS["threadIdx.x"], ir.THREAD_VARS["blockIdx.y"]
ZERO = ir.int32(0)
F32 = "float32"


def cluster_softmax_program(
    rows: int = 4,
    n: int = 2048,
    cluster: int = 4,
    threads: int = 128,
    *,
    max_barrier: bool = True,
    final_barrier: bool = True,
    reuse_partials: bool = False,
    rank_offset: int = 0,
) -> ir.Program:
    """The row softmax over clusters of `cluster` blocks of `threads` threads.

    `max_barrier=False` drops the cluster barrier between the partial maxima and their reads,
    `final_barrier=False` the one before the kernel ends; `reuse_partials` writes the partial
    sums over the partial maxima (which the other blocks may still be reading); `rank_offset`
    reads ranks shifted by that much (beyond the cluster when not 0)."""
    chunk = n // cluster
    per_thread = chunk // threads
    assert per_thread * threads * cluster == n, "n must split evenly over the cluster's threads"
    X = ir.Buffer("X", (rows, n), F32)
    Y = ir.Buffer("Y", (rows, n), F32)
    xs = ir.Buffer("xs", (per_thread,), F32, "local")
    acc = ir.Buffer("acc", (1,), F32, "local")  # a thread's partial, then the row's statistic
    got = ir.Buffer("got", (1,), F32, "local")  # one block's partial, read through the cluster
    row_max = ir.Buffer("row_max", (1,), F32, "local")
    part_max = ir.Buffer("part_max", (1,), F32, "shared")
    part_sum = part_max if reuse_partials else ir.Buffer("part_sum", (1,), F32, "shared")
    e, r = Var("e"), Var("r")

    def at(buf: ir.Buffer, index=ZERO) -> Load:
        return Load(buf, [index])

    def element(index: Var):
        offset = binary("*", BY, ir.int32(n))
        offset = binary("+", offset, binary("*", ci.CLUSTER_RANK, ir.int32(chunk)))
        offset = binary("+", offset, binary("*", index, ir.int32(threads)))
        return binary("+", offset, TX)

    def exp_shifted(index: Var):
        return Call("exp", [binary("-", at(xs, index), at(row_max))], F32)

    def gather(part: ir.Buffer, op: str, into: ir.Buffer, identity: float) -> list[ir.Stmt]:
        rank = binary("+", r, ir.int32(rank_offset)) if rank_offset else r
        fold = ir.Store(into, ZERO, binary(op, at(into), at(got)))
        return [
            ir.Store(into, ZERO, Const(identity, F32)),
            ir.For(
                r, cluster, "unroll", ir.seq([ci.ClusterLoad(got, ZERO, part, ZERO, rank), fold])
            ),
        ]

    def over_elements(stmt: ir.Stmt) -> ir.Stmt:
        return ir.For(e, per_thread, "unroll", stmt)

    body: list[ir.Stmt] = [
        over_elements(ir.Store(xs, e, Load(X, [element(e)]))),
        ir.Store(acc, ZERO, Const(-np.inf, F32)),
        over_elements(ir.Store(acc, ZERO, binary("max", at(acc), at(xs, e)))),
        ir.AllReduce("max", at(acc), None, part_max, ZERO, "threadIdx.x", threads),
    ]
    if max_barrier:
        body.append(ci.ClusterBarrier())
    body += gather(part_max, "max", row_max, -np.inf)
    body += [
        ir.Store(acc, ZERO, Const(0.0, F32)),
        over_elements(ir.Store(acc, ZERO, binary("+", at(acc), exp_shifted(e)))),
        ir.AllReduce("sum", at(acc), None, part_sum, ZERO, "threadIdx.x", threads),
        ci.ClusterBarrier(),
    ]
    body += gather(part_sum, "+", acc, 0.0)
    body.append(over_elements(ir.Store(Y, element(e), binary("/", exp_shifted(e), at(acc)))))
    if final_barrier:
        body.append(ci.ClusterBarrier())
    shared = [part_max] if reuse_partials else [part_max, part_sum]
    kernel = ir.Kernel(
        "cluster_softmax",
        (cluster, rows, 1),
        (threads, 1, 1),
        [xs, acc, got, row_max, *shared],
        ir.seq(body),
        cluster=cluster,
    )
    return ir.Program([kernel], [X, Y], [Y])


def softmax_reference(x: np.ndarray) -> np.ndarray:
    """numpy's row softmax, in float64."""
    shifted = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)
