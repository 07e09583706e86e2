"""The CUDA text of `ir.AllReduce`: a block reduction through warp shuffles, or through shared
memory where the reduced threads are not contiguous lanes of a warp."""

from __future__ import annotations

from autosched.codegen.context import PrintContext
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.te.reduce import BUILTIN_REDUCERS


def emit_allreduce(p: PrintContext, s: ir.AllReduce, d: int) -> None:
    """A block reduction over `s.thread_tag`; every thread ends up holding the result.

    Threads whose tag index is the innermost (stride 1) dimension of the linear thread id form
    contiguous groups of `extent` lanes: when `extent` divides the warp size, an xor butterfly
    inside each group suffices; otherwise a guarded shuffle-down tree reduces each (warp, group)
    segment, segment heads write a small shared array, and each thread folds its group's
    segments. A tag with a stride (threadIdx.y with blockDim.x > 1) goes through shared memory.
    """
    k, t, ex = p.k, p.t, p.ex
    (bx, by, bz), E, T, W = k.block, s.extent, k.threads_per_block, t.warp_size
    axis = ir.THREAD_TAGS.index(s.thread_tag) if s.thread_tag in ir.THREAD_TAGS else -1
    if axis < 0 or k.block[axis] != E:
        raise LoweringError(f"AllReduce over {s.thread_tag} extent {E} but block is {k.block}")
    dtype, ctype, v = s.buffer.dtype, t.types[s.buffer.dtype], p.fresh("red")

    def op(a: str, b: str) -> str:
        return f"({a} + {b})" if s.reducer == "sum" else ex.minmax(s.reducer, dtype, a, b)

    ident = ex(BUILTIN_REDUCERS[s.reducer].identity(dtype))
    value = ex(s.value) if s.cond is None else f"({ex(s.cond)} ? {ex(s.value)} : {ident})"
    tid = [t.thread_index[tag] for tag in ir.THREAD_TAGS]
    steps = ((bx, tid[1], by), (bx * by, tid[2], bz))
    lin = " + ".join([tid[0]] + [f"{n} * {i}" for n, i, extent in steps if extent > 1])
    stride = (1, bx, bx * by)[axis]
    # the barrier that keeps the scratch from being overwritten while another thread reads it,
    # none where the reduction runs once (`AllReduce.once`)
    after_reading = [] if s.once else [f"  {t.barrier}"]
    lines = [f"{{  // allreduce {s.reducer} over {s.thread_tag} ({E} threads)"]
    lines += [f"  {ctype} {v} = {value};", f"  int {v}_lin = {lin};"]
    if T % W == 0:
        mask = "0xffffffffu"
    else:  # the block's last warp is partial: name only its existing lanes
        tail = f"((1u << {T % W}) - 1u)"
        mask = tail if T < W else f"(({v}_lin / {W} == {T // W}) ? {tail} : 0xffffffffu)"
    if E == 1:  # nothing to combine
        pass
    elif stride == 1 and W % E == 0:
        o = E // 2
        while o:
            lines.append(f"  {v} = {op(v, f'__shfl_xor_sync({mask}, {v}, {o}, {E})')};")
            o //= 2
    elif stride == 1:
        segs = max((g * E + E - 1) // W - g * E // W + 1 for g in range(T // E))
        first, slot = f"{v}_g * {E} / {W}", f"{v}_buf[{v}_g * {segs}"
        lines.append(
            f"  int {v}_r = {v}_lin % {E}, {v}_g = {v}_lin / {E}, {v}_lane = {v}_lin % {W};"
        )
        o = 1 << (min(W, E) - 1).bit_length() - 1
        while o:
            guard = f"{v}_lane + {o} < {W} && {v}_r + {o} < {E}"
            lines.append(f"  {{ {ctype} {v}_o = __shfl_down_sync({mask}, {v}, {o});")
            lines.append(f"    if ({guard}) {v} = {op(v, f'{v}_o')}; }}")
            o //= 2
        lines += [
            f"  {t.shared_prefix} {ctype} {v}_buf[{T // E * segs}];",
            f"  if ({v}_lane == 0 || {v}_r == 0) {slot} + {v}_lin / {W} - {first}] = {v};",
            f"  {t.barrier}",
            f"  {v} = {slot}];",
            f"  for (int {v}_s = 1; {v}_s < ({v}_g * {E} + {E - 1}) / {W} - {first} + 1; ++{v}_s)",
            f"    {v} = {op(v, f'{slot} + {v}_s]')};",
            *after_reading,
        ]
    else:
        base = f"{v}_buf[{v}_lin - {tid[axis]} * {stride}"
        lines += [
            f"  {t.shared_prefix} {ctype} {v}_buf[{T}];",
            f"  {v}_buf[{v}_lin] = {v};",
            f"  {t.barrier}",
            f"  {v} = {base}];",
            f"  for (int {v}_s = 1; {v}_s < {E}; ++{v}_s)",
            f"    {v} = {op(v, f'{base} + {v}_s * {stride}]')};",
            *after_reading,
        ]
    lines += [f"  {ex.buffer_names[id(s.buffer)]}[{ex(s.index)}] = {v};", "}"]
    if not any(f"{v}_lin" in line for line in lines[3:]):
        del lines[2]  # the linear thread id is unused (a butterfly over a full warp, say)
    for line in lines:
        p.emit(d, line)
