"""Per-store analysis of a lowered Program: the facts the feature table reads.

One walk over each kernel's statement tree keeps the stack of enclosing loops. The kernel's
thread and block indices act as the outermost loops (blockIdx.x/y/z, then threadIdx.x/y/z, each
with its launch extent), as Ansor's fake `for` loops for thread bindings do. At every `Store`
and `AllReduce` a `StoreInfo` is built:

- operation counts (value, store index, enclosing guard conditions), per execution times the
  number of executions,
- annotation, thread-binding and outer-loop context,
- per buffer it touches: how many elements it touches when the innermost k loops run (for each
  k), the stride of a loop over it, and reuse, in the manner of Ansor's feature.cc.

Index expressions are flat (one index per buffer). They are split into linear terms over loop
variables plus non-linear atoms (floordiv, floormod, min, ...) with constant coefficients; the
buffer's shape maps each coefficient back to a dimension, so a touched region is a box of
per-dimension spans, as Ansor's bound analysis gives, capped by the buffer's shape.
"""

from __future__ import annotations

import functools

from autosched.features.exprs import eval_pair, interval, linearize, var_ids
from autosched.lower import ir
from autosched.te.expr import BinOp, Const, Expr, Var

CACHE_LINE_BYTES = 128  # an L1 line of NVIDIA GPUs (Ansor uses 64 for CPUs)
N_BUFFERS = 5  # per-buffer features are kept for this many buffers of a statement
CURVE_POINTS = 10  # samples of the arithmetic-intensity curve

READ, WRITE, RW = 0, 1, 2
REUSE_LOOP, REUSE_SERIAL, REUSE_NONE = 0, 1, 2


class Loop:
    """One enclosing loop: a For of the IR, or a thread/block index of the launch."""

    __slots__ = ("var", "extent", "kind", "for_node", "touch", "touch_bytes", "touch_elem_bytes")

    def __init__(self, var: Var, extent: int, kind: str, for_node: ir.For | None = None) -> None:
        self.var = var
        self.extent = extent
        self.kind = kind  # serial / unroll / vectorize / a thread tag
        self.for_node = for_node
        # Ansor's for_touch_regions: per buffer (id), the elements that every store met so far
        # under this loop touches in one iteration of it.
        self.touch: dict[int, list[int]] = {}
        self.touch_bytes = 0  # sum of elements * bytes over `touch`
        self.touch_elem_bytes = 0  # sum of bytes over `touch`


class Annotation:
    """The loops of one kind (vectorize / unroll) around a store."""

    __slots__ = ("num", "prod", "length", "inner_loops", "spatial")
    num: int
    prod: int
    length: int
    inner_loops: int
    spatial: int

    def __init__(self) -> None:
        self.num = self.prod = self.length = self.inner_loops = self.spatial = 0


class BufferInfo:
    """Ansor's BufferAccessFeature for one buffer of one store, plus the memory scope and the
    stride along threadIdx.x (coalescing)."""

    __slots__ = (
        "name",
        "acc_type",
        "scope",
        "bytes",
        "unique_bytes",
        "lines",
        "unique_lines",
        "reuse_type",
        "reuse_dis_iter",
        "reuse_dis_bytes",
        "reuse_ct",
        "stride",
        "tx_stride",
    )
    name: str
    acc_type: int  # READ / WRITE / RW
    scope: str
    bytes: int
    unique_bytes: int
    lines: float
    unique_lines: float
    reuse_type: int  # REUSE_LOOP / REUSE_SERIAL / REUSE_NONE
    reuse_dis_iter: float
    reuse_dis_bytes: float
    reuse_ct: float
    stride: float
    tx_stride: float

    @property
    def ratio(self) -> float:
        """What bytes and lines are divided by: the reuse count, or 1/2 without reuse (Ansor)."""
        return self.reuse_ct if self.reuse_ct > 0.5 else 0.5


class StoreInfo:
    """Everything the feature table reads about one store statement."""

    __slots__ = (
        "buffer",
        "ops",
        "outer_prod",
        "num_loops",
        "vec",
        "unroll",
        "threads",
        "vthread",
        "buffers",
        "curve",
        "alloc_bytes",
        "alloc_outer_prod",
        "alloc_scope",
        "kernel_shared_bytes",
        "kernel_local_bytes",
        "unrolled_steps",
        "async_copy",
        "copy_engine",
        "warp_specialized",
    )
    buffer: ir.Buffer
    ops: list[float]  # per OP_KINDS entry, over all executions
    outer_prod: int
    num_loops: int
    vec: Annotation
    unroll: Annotation
    threads: dict[str, int]  # launch tag -> extent
    vthread: int
    buffers: list[BufferInfo]  # most lines (then bytes) first
    curve: list[float]
    alloc_bytes: int
    alloc_outer_prod: int
    alloc_scope: str
    kernel_shared_bytes: int
    kernel_local_bytes: int
    unrolled_steps: int
    async_copy: bool  # a cp.async copy: a store into a buffer that cp.async fills
    copy_engine: bool  # a TMA box copy: the copy engine moves it, not the block's threads
    warp_specialized: bool  # the kernel's TMA pipeline gets a producer warpgroup on the device


# ---- accesses ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return tuple(reversed(out)) or (1,)


def _dim_of(coef: int, strides: tuple[int, ...]) -> tuple[int, int]:
    """(dimension, step in that dimension) of a flat coefficient: the outermost dimension whose
    stride divides it (row-major flattening puts each index times its stride)."""
    c = abs(coef)
    for d, s in enumerate(strides):
        if c >= s and c % s == 0:
            return d, c // s
    return len(strides) - 1, c


class Atom:
    """A non-linear term of an index. Most are floordiv / floormod chains over a linear form
    (what split and fuse produce): those are evaluated from the form, without a tree walk."""

    __slots__ = ("expr", "vids", "chain", "terms", "const")
    expr: Expr
    vids: set[int]  # ids of the variables it uses
    # (is floordiv, divisor) from the innermost out, when it is such a chain; then `terms` and
    # `const` are the linear form under it
    chain: list[tuple[bool, int]] | None
    terms: dict[int, int]
    const: int

    def __init__(self, e: Expr) -> None:
        self.expr = e
        chain: list[tuple[bool, int]] = []
        x = e
        while (
            type(x) is BinOp
            and x.op in ("floordiv", "floormod")
            and type(x.b) is Const
            and x.b.value > 0
        ):
            chain.append((x.op == "floordiv", x.b.value))
            x = x.a
        terms: dict[int, int] = {}
        inner: list = []
        const = linearize(x, 1, terms, inner) if chain else 0
        if chain and not inner:
            self.chain = chain[::-1]
            self.terms = {k: v for k, v in terms.items() if v}
            self.const = const
            self.vids = set(self.terms)
        else:
            self.chain = None
            self.vids = var_ids(e, set())

    def interval(self, hi_of: dict[int, int]) -> tuple[int, int]:
        """Range when the variables in `hi_of` run over 0..hi_of[id] and the others are 0."""
        if self.chain is None:
            return interval(self.expr, hi_of)
        lo = hi = self.const
        for vid, c in self.terms.items():
            h = hi_of.get(vid)
            if h:
                if c > 0:
                    hi += c * h
                else:
                    lo += c * h
        for is_div, c in self.chain:
            if is_div:
                lo, hi = lo // c, hi // c
            elif lo // c == hi // c:
                lo, hi = lo % c, hi % c
            else:
                lo, hi = 0, c - 1
        return lo, hi

    def delta(self, vid: int, val: int) -> int:
        """Value with variable `vid` = val minus value with it 0 (all others 0)."""
        if self.chain is None:
            a0, a1 = eval_pair(self.expr, vid, val)
            return a1 - a0
        v0 = self.const
        v1 = v0 + self.terms.get(vid, 0) * val
        for is_div, c in self.chain:
            if is_div:
                v0, v1 = v0 // c, v1 // c
            else:
                v0, v1 = v0 % c, v1 % c
        return v1 - v0


class Linear:
    """A flat index as linear terms {var id: coefficient} plus atoms [(coefficient, Atom)],
    with a cache of its strides. Shared by equal indices of one program."""

    __slots__ = ("terms", "atoms", "strides", "vids")

    def __init__(self, index: Expr, atom_cache: dict[tuple, Atom]) -> None:
        terms: dict[int, int] = {}
        atoms: list[tuple[int, Expr]] = []
        linearize(index, 1, terms, atoms)
        self.terms = {k: v for k, v in terms.items() if v}
        self.atoms: list[tuple[int, Atom]] = []
        for c, a in atoms:
            atom = atom_cache.get(a._key)  # equal atoms recur across the indices of a program
            if atom is None:
                atom = atom_cache[a._key] = Atom(a)
            self.atoms.append((c, atom))
        self.vids = set(self.terms).union(*(a.vids for _, a in self.atoms))
        self.strides: dict[tuple[int, int], float] = {}

    def stride(self, loop: Loop) -> float:
        """Flat-index step when `loop`'s variable goes 0 -> 1 (others 0); 0 if unused. For an
        index that is not linear in it, the average step over the loop when that one is 0."""
        vid = id(loop.var)
        key = (vid, loop.extent)
        got = self.strides.get(key)
        if got is not None:
            return got
        s: float = self.terms.get(vid, 0)  # an int, unless averaged over the loop below
        used = [(c, a) for c, a in self.atoms if vid in a.vids]
        if used:
            step: float = s + sum(c * a.delta(vid, 1) for c, a in used)
            if step == 0 and loop.extent > 1:
                last = loop.extent - 1
                step = (s * last + sum(c * a.delta(vid, last) for c, a in used)) / last
            s = step
        self.strides[key] = got = abs(s)
        return got


class Access:
    """A buffer's accesses in one store statement."""

    __slots__ = (
        "buffer",
        "acc_type",
        "exprs",
        "linear",
        "index_levels",
        "levels",
        "touched",
        "spans",
    )

    def __init__(self, buffer: ir.Buffer, acc_type: int, index: Expr) -> None:
        self.buffer = buffer
        self.acc_type = acc_type
        self.exprs = [index]
        self.linear: list[Linear] = []  # per index
        self.index_levels: list[set[int]] = []  # per index: loop levels whose variable it uses
        self.levels: set[int] = set()  # loop levels whose variable some index uses
        self.touched: list[int] = []  # per loop level: elements touched by the loops inside
        self.spans: list[int] = []  # per dimension: span with all loops running

    def add(self, index: Expr) -> None:
        if not any(x.same_as(index) for x in self.exprs):
            self.exprs.append(index)


class _AtomSpan:
    """An atom of one index and its span over the loops added so far, shared by the events of
    the atom's variables (the span grows as each of its loops is added)."""

    __slots__ = ("atom", "span")

    def __init__(self, atom: Atom) -> None:
        self.atom = atom
        self.span = 0


# (loop level, index number, dimension, step in it, the atom when the term is not linear)
_Event = tuple[int, int, int, int, _AtomSpan | None]


def touched_regions(
    accesses: list[Access],
    loops: list[Loop],
    level_of: dict[int, int],
    cache: dict[Expr, Linear],
    atom_cache: dict[tuple, Atom],
) -> None:
    """Fill `touched` (per loop level lv: elements touched while loops lv.. run and the outer
    ones stay fixed) and `spans` (per dimension, all loops running) of every access:
    per-dimension boxes, as Ansor's ComputeRegion. The caches live as long as one program:
    `cache` maps index exprs to Linear forms, `atom_cache` atom keys to Atoms."""
    n = len(loops)
    for acc in accesses:
        shape = acc.buffer.shape or (1,)
        strides = _strides(shape)
        events: list[_Event] = []
        acc.linear, acc.index_levels = [], []
        for k, e in enumerate(acc.exprs):
            lin = cache.get(e)
            if lin is None:
                lin = cache[e] = Linear(e, atom_cache)
            acc.linear.append(lin)
            levels = set()
            for vid, c in lin.terms.items():
                lv = level_of.get(vid)
                if lv is not None:
                    d, u = _dim_of(c, strides)
                    events.append((lv, k, d, u, None))
                    levels.add(lv)
            for c, a in lin.atoms:
                d, u = _dim_of(c, strides)
                tracked = _AtomSpan(a)
                for vid in a.vids:
                    lv = level_of.get(vid)
                    if lv is not None:
                        events.append((lv, k, d, u, tracked))
                        levels.add(lv)
            acc.index_levels.append(levels)
        acc.levels = set().union(*acc.index_levels)
        events.sort(key=_first, reverse=True)  # inner loops first
        sums = [[0] * len(shape) for _ in acc.exprs]  # per index, per dimension: span - 1
        spans = acc.spans = [1] * len(shape)
        touched = acc.touched = [1] * n
        hi_of: dict[int, int] = {}  # the running loops' variables (of those the index uses)
        cur, filled, i, n_ev = 1, n, 0, len(events)
        while i < n_ev:
            lv = events[i][0]
            for k in range(lv + 1, filled):  # loops that do not move over it: same region
                touched[k] = cur
            e1 = loops[lv].extent - 1
            hi_of[id(loops[lv].var)] = e1
            while i < n_ev and events[i][0] == lv:
                _, k, d, u, tracked_atom = events[i]
                if tracked_atom is None:
                    sums[k][d] += u * e1
                else:
                    lo, hi = tracked_atom.atom.interval(hi_of)
                    sums[k][d] += u * (hi - lo - tracked_atom.span)
                    tracked_atom.span = hi - lo
                i += 1
            cur = 1
            for d, size in enumerate(shape):
                x = (sums[0][d] if len(sums) == 1 else max(x[d] for x in sums)) + 1
                if x > size:
                    x = size
                spans[d] = x
                cur *= x
            touched[lv] = cur
            filled = lv
        for k in range(filled):
            touched[k] = cur


def _first(event: _Event) -> int:
    return event[0]
