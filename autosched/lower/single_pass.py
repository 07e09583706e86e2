"""The lowering pass `finish_in_last_block`: a kernel of partial sums marked `single_pass`
(`ir.Kernel.single_pass`, from the `single_pass` pragma on its root stage) and the next
kernel, which sums its partials (and applies what follows in that kernel: a square root, a
cast), become one kernel.

    partial-sum body                        (every block, as before)
    ThreadFence                             (each thread's partials visible to all blocks)
    CountArrival(counter[0], flag)          (thread 0: flag = atomicAdd(counter, 1))
    if flag[0] == blocks - 1:               (the last block to arrive)
        the summing kernel's body, over its whole launch
        counter[0] = 0                      (thread 0: the next launch starts from zero)

The last block runs the summing kernel's launch in one of two ways:

- its block has the same shape (a block reduction over the parts, as the summing kernel's
  threads did): one iteration per block of the summing kernel, its block index the loop's,
  a barrier between iterations;
- its body is per thread (no barrier, block reduction, shared memory or warp statement: a
  loop over the parts in each thread): the summing kernel's (block, thread) pairs spread
  over the last block's threads, as many rounds as it takes.

Any other pair is refused (LoweringError): the sampler rejects the state. The counter is one
int32, a workspace of the program (`ir.Program.workspaces`: zeroed when allocated). The sum
reads the partials in the order the summing kernel does, whichever block is last, so the
result is the same bits in every run: unlike atomics on floats, it is deterministic.
"""

from __future__ import annotations

import dataclasses

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.single_pass_ir import COUNTER_DTYPE, CountArrival, ThreadFence, last_block
from autosched.lower.stmt_walk import expressions, map_exprs
from autosched.te.expr import BinOp, Expr, Load, Var
from autosched.te.visitor import substitute, walk

# the statements a per-thread body is made of (the second way above)
PER_THREAD_STMTS = (ir.Seq, ir.For, ir.IfThenElse, ir.Store)


def finish_in_last_block(program: ir.Program) -> ir.Program:
    """`program` with each `single_pass` kernel merged with the kernel after it (the module's
    description); the same program when none is marked."""
    if not any(k.single_pass for k in program.kernels):
        return program
    kernels: list[ir.Kernel] = []
    counters: list[ir.Buffer] = []
    pending = list(program.kernels)
    while pending:
        k = pending.pop(0)
        if not k.single_pass:
            kernels.append(k)
            continue
        if not pending:
            raise LoweringError(f"single pass: kernel {k.name} has no kernel after it to finish")
        name = f"{partials(k, pending[0], program)[0].name}_arrivals"
        counter = ir.Buffer(name, (1,), COUNTER_DTYPE)
        kernels.append(merged(k, pending.pop(0), counter))
        counters.append(counter)
    return dataclasses.replace(
        program,
        kernels=kernels,
        params=program.params + counters,
        temps=program.temps + counters,
        workspaces=program.workspaces + counters,
    )


def partials(k: ir.Kernel, finish: ir.Kernel, program: ir.Program) -> list[ir.Buffer]:
    """The temporaries `k` writes and `finish` reads; LoweringError when there are none."""
    temps = {id(b) for b in program.temps}
    written = {
        id(s.buffer): s.buffer
        for s in ir.iter_stmts(k.body)
        if isinstance(s, (ir.Store, ir.AllReduce)) and id(s.buffer) in temps
    }
    read = {id(n.buffer) for e in expressions(finish.body) for n in walk(e) if isinstance(n, Load)}
    found = [b for key, b in written.items() if key in read]
    if not found:
        raise LoweringError(
            f"single pass: kernel {finish.name} reads no partial result of kernel {k.name}"
        )
    return found


def merged(k: ir.Kernel, finish: ir.Kernel, counter: ir.Buffer) -> ir.Kernel:
    """Kernel `k` whose last block runs `finish` (the module's description)."""
    problem = unmergeable(k, finish)
    if problem is not None:
        raise LoweringError(f"single pass: kernels {k.name} and {finish.name}: {problem}")
    zero = ir.int32(0)
    flag = ir.Buffer(f"{counter.name}_seen", (1,), COUNTER_DTYPE, "shared")
    blocks = k.grid[0] * k.grid[1] * k.grid[2]
    arrival = CountArrival(counter, zero, flag, blocks)
    reset = ir.IfThenElse(first_thread(), ir.Store(counter, zero, zero))
    finishing = ir.seq([whole_launch(k, finish), reset])
    body = ir.seq([k.body, ThreadFence(), arrival, last_block(arrival, finishing)])
    return dataclasses.replace(
        k,
        allocs=[*k.allocs, *finish.allocs, flag],
        body=body,
        unit_vars=k.unit_vars + finish.unit_vars,
        stream_writes=k.stream_writes or finish.stream_writes,
        shared_aliases=k.shared_aliases + finish.shared_aliases,
        single_pass=False,
    )


def unmergeable(k: ir.Kernel, finish: ir.Kernel) -> str | None:
    """Why the two kernels cannot be one whatever their launches (None: they can)."""
    if k.cluster > 1 or finish.cluster > 1:
        return "thread-block clusters"
    loops = [s for x in (k, finish) for s in ir.iter_stmts(x.body) if isinstance(s, ir.For)]
    if any(loop.kind == ir.VTHREAD_KIND for loop in loops) or k.vthread * finish.vthread > 1:
        return "virtual threads"
    if k.fast_exp != finish.fast_exp:
        return "fast exponentials in one of them only"
    return None


def first_thread() -> Expr:
    """threadIdx.x == threadIdx.y == threadIdx.z == 0."""
    tags = ir.THREAD_TAGS
    return ir.conjunction([BinOp("==", ir.THREAD_VARS[t], ir.int32(0), "bool") for t in tags])


def digits(v: Expr, extents: tuple[int, int, int], tags: tuple[str, ...]) -> dict[Var, Expr]:
    """The launch indices `tags` (x fastest) that the linear index `v` (below the product of
    `extents`) gives: (v // stride) % extent each, no division by 1 and no modulo by what
    `v` cannot reach."""
    out: dict[Var, Expr] = {}
    stride = 1
    for tag, extent in zip(tags, extents, strict=True):
        digit = v if stride == 1 else BinOp("floordiv", v, ir.int32(stride), ir.I32)
        if stride * extent < size(extents):
            digit = BinOp("floormod", digit, ir.int32(extent), ir.I32)
        out[ir.THREAD_VARS[tag]] = digit if extent > 1 else ir.int32(0)
        stride *= extent
    return out


def size(extents: tuple[int, int, int]) -> int:
    return extents[0] * extents[1] * extents[2]


def whole_launch(k: ir.Kernel, finish: ir.Kernel) -> ir.Stmt:
    """`finish`'s body over its whole launch, run by the threads of one block of `k`."""
    if finish.block == k.block:
        return block_per_iteration(finish)
    if not all(isinstance(s, PER_THREAD_STMTS) for s in ir.iter_stmts(finish.body)) or any(
        b.scope == "shared" for b in finish.allocs
    ):
        raise LoweringError(
            f"single pass: kernel {finish.name} (block {finish.block}) synchronises its threads, "
            f"and the partials' kernel {k.name} has other blocks ({k.block})"
        )
    return threads_per_round(k, finish)


def block_per_iteration(finish: ir.Kernel) -> ir.Stmt:
    """`finish`'s body once per block of its grid, its block index the loop's."""
    n = size(finish.grid)
    if n == 1:
        return substituted(finish.body, digits(ir.int32(0), finish.grid, ir.BLOCK_TAGS))
    v = Var("last_block_b", ir.I32)
    body = substituted(finish.body, digits(v, finish.grid, ir.BLOCK_TAGS))
    return ir.For(v, n, "serial", ir.seq([body, ir.Barrier()]))


def threads_per_round(k: ir.Kernel, finish: ir.Kernel) -> ir.Stmt:
    """`finish`'s per-thread body for each of its (block, thread) pairs, spread over the
    threads of a block of `k`: pair `round * threads + thread` in each round."""
    per_block, threads = finish.threads_per_block, k.threads_per_block
    total = size(finish.grid) * per_block
    rounds = -(-total // threads)
    r = Var("last_block_r", ir.I32)
    tid = linear_thread(k.block)
    pair = tid if rounds == 1 else BinOp("+", BinOp("*", r, ir.int32(threads), ir.I32), tid, ir.I32)
    block = BinOp("floordiv", pair, ir.int32(per_block), ir.I32) if per_block > 1 else pair
    thread = BinOp("floormod", pair, ir.int32(per_block), ir.I32)
    mapping = digits(block, finish.grid, ir.BLOCK_TAGS)
    mapping.update(digits(thread, finish.block, ir.THREAD_TAGS))
    body = substituted(finish.body, mapping)
    if total % threads:
        body = ir.IfThenElse(BinOp("<", pair, ir.int32(total), "bool"), body)
    return body if rounds == 1 else ir.For(r, rounds, "serial", body)


def linear_thread(block: tuple[int, int, int]) -> Expr:
    """The thread's index within its block, x fastest."""
    x, y, z = (ir.THREAD_VARS[t] for t in ir.THREAD_TAGS)
    out: Expr = x
    if block[1] > 1:
        out = BinOp("+", out, BinOp("*", y, ir.int32(block[0]), ir.I32), ir.I32)
    if block[2] > 1:
        out = BinOp("+", out, BinOp("*", z, ir.int32(block[0] * block[1]), ir.I32), ir.I32)
    return out


def substituted(s: ir.Stmt, mapping: dict[Var, Expr]) -> ir.Stmt:
    """`s` with the launch indices in `mapping` replaced (all at once)."""
    return map_exprs(s, lambda e: substitute(e, mapping))


__all__ = ["finish_in_last_block"]
