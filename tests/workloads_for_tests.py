"""Small DAGs and hand-written step lists shared by the loop-state / transform-step tests.

The conv2d+bias+relu DAG is the seeds' (ResNet-50's last 3x3 layer: N=1, 7x7, 512 -> 512,
stride 1, pad 1), with TVM's op and axis names: pad_temp, conv2d_nchw, T_add, compute.
`seed_conv_state` replays the seeds' best schedule as steps (TVM's step order and kinds).
"""

from __future__ import annotations

from autosched import te
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State

try:  # topi is being written concurrently; fall back to the same ops built by hand
    from autosched import topi as _topi

    _HAVE_TOPI = hasattr(_topi, "nn") and hasattr(_topi.nn, "conv2d_nchw")
except ImportError:  # pragma: no cover
    _HAVE_TOPI = False


def conv2d_bias_relu_dag(n=1, h=7, w=7, co=512, ci=512, kh=3, kw=3, pad=1) -> ComputeDAG:
    """`compute = relu(conv2d_nchw(pad_temp(data), kernel) + bias)`, stride 1."""
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    bias = te.placeholder((1, co, 1, 1), name="bias")
    if _HAVE_TOPI:
        conv = _topi.nn.conv2d_nchw(data, kernel, 1, pad, dilation=1, out_dtype="float32")
        out = _topi.nn.relu(conv + bias)
        return ComputeDAG([data, kernel, bias, out])
    hp, wp = h + 2 * pad, w + 2 * pad
    pad_temp = te.compute(
        (n, ci, hp, wp),
        lambda i0, i1, i2, i3: te.if_then_else(
            te.all(i2 >= pad, i2 < h + pad, i3 >= pad, i3 < w + pad),
            data[i0, i1, i2 - pad, i3 - pad],
            te.const(0.0, "float32"),
        ),
        name="pad_temp",
    )
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    conv = te.compute(
        (n, co, h, w),
        lambda nn, ff, yy, xx: te.sum(
            pad_temp[nn, rc, yy + ry, xx + rx] * kernel[ff, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv2d_nchw",
    )
    t_add = te.compute(
        (n, co, h, w),
        lambda ax0, ax1, ax2, ax3: conv[ax0, ax1, ax2, ax3] + bias[ax0, ax1, 0, 0],
        name="T_add",
    )
    out = te.compute(
        (n, co, h, w),
        lambda i0, i1, i2, i3: te.max(t_add[i0, i1, i2, i3], te.const(0.0, "float32")),
        name="compute",
    )
    return ComputeDAG([data, kernel, bias, out])


def matmul_dag(n=64, m=64, k=64) -> ComputeDAG:
    """`C(i, j) += A[i, k] * B[k, j]` with TVM-ish names (A, B, C)."""
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    rk = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, rk] * b[rk, j], axis=[rk]), name="C")
    return ComputeDAG([a, b, c])


# The seeds' tile sizes, outer to inner (the SplitStep `lengths`; the outermost part is implied).
SEED_001_TILES = {
    "nn": (1, 1, 1, 1),
    "ff": (1, 32, 1, 1),
    "yy": (7, 1, 1, 1),
    "xx": (1, 1, 1, 1),
    "rc": (1, 2),
    "ry": (1, 3),
    "rx": (1, 3),
}
SEED_001_VECTORS = {"kernel.shared": 1, "pad_temp.shared": 2}
SEED_002_TILES = {
    "nn": (1, 1, 1, 1),
    "ff": (1, 64, 2, 1),
    "yy": (1, 1, 1, 1),
    "xx": (1, 1, 7, 1),
    "rc": (4, 2),
    "ry": (1, 1),
    "rx": (3, 1),
}
SEED_002_VECTORS = {"kernel.shared": 1, "pad_temp.shared": 1}


def seed_conv_state(
    dag: ComputeDAG, tiles=SEED_001_TILES, vectors=SEED_001_VECTORS, unroll: int = 512
) -> State:
    """The seeds' best conv2d+bias+relu schedule as a step list (TVM's Ansor GPU sketch:
    SSSRRSRS tiling, fused consumer, shared-memory cooperative fetching, unroll pragma)."""
    conv, relu = "conv2d_nchw", "compute"
    s = dag.get_init_state()
    s = s.compute_inline("T_add")
    split_ids = {}
    for ax in ("nn", "ff", "yy", "xx", "rc", "ry", "rx"):
        split_ids[ax] = len(s.steps)
        s = s.split(conv, ax, tiles[ax])
    sp, rd = ("nn", "ff", "yy", "xx"), ("rc", "ry", "rx")
    order = [a + "_o_o_o_o" for a in sp] + [a + "_o_o_o_i" for a in sp] + [a + "_o_o_i" for a in sp]
    order += [a + "_o_o" for a in rd] + [a + "_o_i" for a in rd] + [a + "_o_i" for a in sp]
    order += [a + "_i" for a in rd] + [a + "_i" for a in sp]
    s = s.reorder(conv, order)
    for ax, src in zip(("i0", "i1", "i2", "i3"), ("nn", "ff", "yy", "xx"), strict=True):
        s = s.follow_split(relu, ax, split_ids[src], 3)
    s = s.reorder(
        relu,
        [
            f"{a}{suffix}"
            for suffix in ("_o_o_o", "_o_o_i", "_o_i", "_i")
            for a in ("i0", "i1", "i2", "i3")
        ],
    )
    s = s.compute_at(conv, relu, "i3_o_i")
    s = s.cache_read("kernel", "shared", [conv])
    s = s.compute_at("kernel.shared", conv, "rx_o_o")
    s = s.cache_read("pad_temp", "shared", [conv])
    s = s.compute_at("pad_temp.shared", conv, "rx_o_o")
    s = s.compute_inline("pad_temp")
    for level, (suffix, thread) in enumerate(
        (("_o_o_o", "blockIdx.x"), ("_o_o_i", "vthread"), ("_o_i", "threadIdx.x"))
    ):
        s = s.fuse(relu, [f"i{d}{suffix}" for d in range(4)])
        s = s.bind(relu, s[relu].iters[level].name, thread)
    spatial_splits = [split_ids[a] for a in ("nn", "ff", "yy", "xx")]
    for cache in ("kernel.shared", "pad_temp.shared"):
        s = s.fuse(cache, ["ax0", "ax1", "ax2", "ax3"])
        fused = s[cache].iters[0].name
        s = s.split(cache, fused, [vectors[cache]])
        s = s.vectorize(cache, fused + "_i")
        s = s.follow_fused_split(cache, fused + "_o", spatial_splits, 1, True)
        s = s.bind(cache, fused + "_o_i", "threadIdx.x")
    s = s.pragma(conv, "nn_o_o_o_o", "auto_unroll_max_step", unroll)
    return s


MATMUL_TILES = {"i": (1, 8, 2, 2), "j": (2, 8, 1, 2), "k": (4, 2)}


def matmul_shared_state(
    dag: ComputeDAG, tiles=MATMUL_TILES, vectors=(2, 1), unroll: int = 64
) -> State:
    """A hand-built Ansor-style GPU schedule of `matmul_dag`: cache_write local, SSSRRSRS tiling,
    shared-memory caches of A and B at the outer reduction tile, fused block/vthread/thread
    bindings, cooperative fetching (vectorised), storage_align and an unroll pragma."""
    s = dag.get_init_state()
    s = s.cache_write("C", "local")
    ids = {}
    for ax in ("i", "j", "k"):
        ids[ax] = len(s.steps)
        s = s.split("C.local", f"{ax}_c" if ax != "k" else "k", tiles[ax])
    sp = ("i_c", "j_c")
    s = s.reorder(
        "C.local",
        [f"{a}_o_o_o_o" for a in sp]
        + [f"{a}_o_o_o_i" for a in sp]
        + [f"{a}_o_o_i" for a in sp]
        + ["k_o_o", "k_o_i"]
        + [f"{a}_o_i" for a in sp]
        + ["k_i"]
        + [f"{a}_i" for a in sp],
    )
    for ax in ("i", "j"):
        s = s.follow_split("C", ax, ids[ax], 3)
    s = s.reorder("C", [f"{a}{suf}" for suf in ("_o_o_o", "_o_o_i", "_o_i", "_i") for a in "ij"])
    s = s.compute_at("C.local", "C", "j_o_i")
    for src in ("A", "B"):
        s = s.cache_read(src, "shared", ["C.local"])
        s = s.compute_at(f"{src}.shared", "C.local", "k_o_o")
    s = s.storage_align("A.shared", "ax0", 32, 1)
    for suffix, thread in (
        ("_o_o_o", "blockIdx.x"),
        ("_o_o_i", "vthread"),
        ("_o_i", "threadIdx.x"),
    ):
        level = ("_o_o_o", "_o_o_i", "_o_i").index(suffix)
        s = s.fuse("C", [f"i{suffix}", f"j{suffix}"])
        s = s.bind("C", level, thread)
    for cache, vec in zip(("A.shared", "B.shared"), vectors, strict=True):
        s = s.fuse(cache, ["ax0", "ax1"])
        s = s.split(cache, "ax0_ax1_fused", [vec])
        s = s.vectorize(cache, "ax0_ax1_fused_i")
        s = s.follow_fused_split(cache, "ax0_ax1_fused_o", [ids["i"], ids["j"]], 1, True)
        s = s.bind(cache, "ax0_ax1_fused_o_i", "threadIdx.x")
    s = s.pragma("C.local", 0, "auto_unroll_max_step", unroll)
    return s


# ---- random valid step sequences (the property test, and its replaying subprocess) -------------

PROPERTY_DAGS = {
    "matmul": lambda: matmul_dag(24, 40, 16),
    "conv": lambda: conv2d_bias_relu_dag(n=1, h=6, w=6, co=8, ci=4, kh=3, kw=3, pad=1),
}


def summary_json(state: State) -> list:
    """Every stage's `summary()` as plain JSON values (Iterators as lists)."""

    def plain(v):
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if hasattr(v, "__slots__") and hasattr(v, "__dataclass_fields__"):
            return [type(v).__name__] + [plain(getattr(v, f)) for f in v.__dataclass_fields__]
        return v

    return [plain(s.summary()) for s in state.stages]


def random_step(state: State, rng):
    """One random step built from the current state, or None when the pick found nothing.

    Mostly valid by construction; a few picks (thread bindings, ...) may still be rejected by the
    step itself with ScheduleError, which the caller drops (as the search does)."""
    from autosched.schedule.dataflow import reads_of, transitive_consumers
    from autosched.schedule.stage import ATTACHED, INLINED, THREAD_ANNOTATIONS
    from autosched.schedule.steps import (
        AnnotationStep,
        CacheReadStep,
        CacheWriteStep,
        ComputeAtStep,
        ComputeInlineStep,
        ComputeRootStep,
        DoubleBufferStep,
        FollowFusedSplitStep,
        FollowSplitStep,
        FuseStep,
        PragmaStep,
        ReorderStep,
        SplitStep,
        StorageAlignStep,
    )

    stages = state.stages
    live = [i for i, s in enumerate(stages) if not s.is_placeholder and s.compute_at != INLINED]
    if not live:
        return None
    si = rng.choice(live)
    stage = stages[si]
    free = [k for k, it in enumerate(stage.iters) if it.annotation == "none"]
    kind = rng.choice(
        [
            "SP",
            "SP",
            "FU",
            "RE",
            "CI",
            "CHR",
            "CHW",
            "CA",
            "CA",
            "CR",
            "AN",
            "AN",
            "PR",
            "SA",
            "DB",
            "FSP",
            "FFSP",
        ]
    )
    names = {s.name for s in stages}
    if kind == "SP" and free:
        k = rng.choice(free)
        lengths = tuple(
            rng.choice([1, 2, 3, 4, 8, None] if rng.random() < 0.1 else [1, 2, 3, 4, 8])
            for _ in range(rng.randint(1, 3))
        )
        return SplitStep(si, k, stage.iters[k].extent, lengths, rng.random() < 0.8)
    if kind == "FU" and len(free) >= 2:
        runs = [k for k in free if k + 1 in free]
        if runs:
            k = rng.choice(runs)
            n = 2 + (rng.random() < 0.3 and k + 2 in free)
            return FuseStep(si, tuple(range(k, k + n)))
    if kind == "RE" and len(stage.iters) >= 2:
        perm = list(range(len(stage.iters)))
        rng.shuffle(perm)
        return ReorderStep(si, tuple(perm))
    if kind == "CI":
        info = state.dag.info.get(id(stage.produces))
        ok = (
            info is not None
            and not info.is_output
            and not info.has_reduction
            and stage.origin == "dag"
            and not any(s.attach and s.attach[0] == si for s in stages)
        )
        return ComputeInlineStep(si) if ok else None
    if kind == "CHR":
        src = rng.randrange(len(stages))
        if stages[src].compute_at == INLINED or stages[src].origin != "dag":
            return None
        readers = [
            j
            for j in range(len(stages))
            if stages[j].compute_at != INLINED and src in reads_of(state, j)
        ]
        scope = rng.choice(["shared", "local"])
        if not readers or f"{stages[src].name}.{scope}" in names:
            return None
        picked = tuple(sorted(rng.sample(readers, rng.randint(1, len(readers)))))
        return CacheReadStep(src, scope, picked)
    if kind == "CHW":
        ok = (
            stage.origin == "dag"
            and stage.iters == stage.root_iters
            and f"{stage.name}.local" not in names
            and not any(s.attach and s.attach[0] == si for s in stages)
        )
        return CacheWriteStep(si, "local") if ok else None
    if kind == "CA":
        targets = [t for t in transitive_consumers(state, si) if stages[t].compute_at != INLINED]
        if not targets:
            return None
        t = rng.choice(sorted(targets))
        if not stages[t].iters:
            return None
        return ComputeAtStep(si, t, rng.randrange(len(stages[t].iters)))
    if kind == "CR" and stage.compute_at == ATTACHED:
        return ComputeRootStep(si)
    if kind == "AN" and free:
        ann = rng.choice(
            [
                "unroll",
                "vectorize",
                "parallel",
                "vthread",
                "blockIdx.x",
                "threadIdx.x",
                "threadIdx.y",
            ]
        )
        k = rng.choice(free)
        if ann in THREAD_ANNOTATIONS and ann != "vthread":
            same = [it for it in stage.iters if it.annotation == ann]
            if same and same[0].extent != stage.iters[k].extent:
                ann = "unroll"  # binding it would be rejected (tested elsewhere)
        return AnnotationStep(si, k, ann)
    if kind == "PR" and stage.iters:
        value = rng.choice(
            [
                "auto_unroll_max_step$16",
                "auto_unroll_max_step$512",
                "unroll_explicit$0",
                "unroll_explicit$1",
            ]
        )
        return PragmaStep(si, 0, value)
    if kind == "SA" and stage.origin == "cache_read" and stage.iters:
        factor = rng.choice([16, 32])
        return StorageAlignStep(si, rng.randrange(len(stage.iters)), factor, rng.randrange(factor))
    if kind == "DB" and stage.scope == "shared":
        return DoubleBufferStep(si)
    splits = [n for n, s in enumerate(state.steps) if isinstance(s, SplitStep)]
    if kind == "FSP" and splits and free:
        src = rng.choice(splits)
        k = rng.choice(free)
        return FollowSplitStep(si, k, src, rng.randint(1, len(state.steps[src].lengths) + 1))
    if kind == "FFSP" and splits and free:
        srcs = tuple(rng.sample(splits, min(len(splits), rng.randint(1, 3))))
        level = rng.randrange(min(len(state.steps[n].lengths) for n in srcs))
        return FollowFusedSplitStep(si, rng.choice(free), srcs, level, rng.random() < 0.8)
    return None


def random_states(dag: ComputeDAG, rng, n_steps: int) -> tuple[State, int]:
    """A state after up to `n_steps` random valid steps, and how many picks were rejected."""
    from autosched.errors import ScheduleError

    state, rejected, tries = dag.get_init_state(), 0, 0
    while len(state.steps) < n_steps and tries < 10 * n_steps:
        tries += 1
        step = random_step(state, rng)
        if step is None:
            continue
        try:
            state = state.apply(step)
        except ScheduleError:
            rejected += 1
    return state, rejected


# ---- seed 000: TVM's AutoTVM conv2d template ("tune_conv2d_cuda") as a step list ---------------


def conv2d_dag(n=1, h=7, w=7, co=512, ci=512, kh=3, kw=3, pad=1) -> ComputeDAG:
    """Seed 000's workload: `conv2d_nchw(pad_temp(data), kernel)`, stride 1, no bias or relu
    (ResNet's last 3x3 layer at the default sizes)."""
    from autosched import topi

    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, pad, dilation=1, out_dtype="float32")
    return ComputeDAG([data, kernel, conv])


# Configurations in AutoTVM's notation (`cfg[name].size`, outermost -1 = whatever is left).
# The best one seed 000 printed after its 20 trials (0.90 ms on its GPU): 4 threads a block.
AUTOTVM_SEED_BEST = {
    "tile_f": (-1, 1, 4, 1), "tile_y": (-1, 1, 1, 1), "tile_x": (-1, 7, 1, 1),
    "tile_rc": (-1, 4, 1), "tile_ry": (-1, 1, 1), "tile_rx": (-1, 1, 3),
    "auto_unroll_max_step": 1500, "unroll_explicit": 1,
}  # fmt: skip
# A sensible point of the same space for 512x7x7: 16x7 = 112 blocks of 8x7 = 56 threads, each
# thread 2 (vthread) x 2 filters of one output pixel, 8 input channels a shared-memory stage.
AUTOTVM_CONV_CFG = {
    "tile_f": (-1, 2, 8, 2), "tile_y": (-1, 1, 1, 1), "tile_x": (-1, 1, 7, 1),
    "tile_rc": (-1, 4, 2), "tile_ry": (-1, 1, 3), "tile_rx": (-1, 1, 3),
    "auto_unroll_max_step": 512, "unroll_explicit": 1,
}  # fmt: skip
# Reduced shapes for the CPU interpreter (conv2d_dag(co=16, ci=8)), exercising every level:
# vthreads on f and x, threads on all of z/y/x, several blocks on each grid axis.
AUTOTVM_SMALL_CFGS = {
    "chosen": {**AUTOTVM_CONV_CFG, "tile_f": (-1, 2, 4, 2), "tile_rc": (-1, 2, 2)},
    "seed_best": AUTOTVM_SEED_BEST,
    "all_levels": {
        "tile_f": (-1, 2, 2, 2), "tile_y": (-1, 1, 7, 1), "tile_x": (-1, 1, 1, 7),
        "tile_rc": (-1, 2, 1), "tile_ry": (-1, 3, 1), "tile_rx": (-1, 1, 3),
        "auto_unroll_max_step": 0, "unroll_explicit": 0,
    },
    "blocks_xyz": {
        "tile_f": (-1, 1, 4, 1), "tile_y": (-1, 1, 1, 1), "tile_x": (-1, 1, 1, 1),
        "tile_rc": (-1, 1, 4), "tile_ry": (-1, 1, 1), "tile_rx": (-1, 3, 1),
        "auto_unroll_max_step": 1500, "unroll_explicit": 0,
    },
}  # fmt: skip


def autotvm_conv_state(dag: ComputeDAG, cfg=AUTOTVM_CONV_CFG) -> State:
    """Seed 000's schedule template (`conv2d_no_batching`) instantiated with `cfg`.

    4-level tiling of f, y, x bound to blockIdx.z/y/x, vthread, threadIdx.z/y/x; a local
    accumulator (cache_write) computed at threadIdx.x; 3-level tiling of rc, ry, rx; shared
    caches of the padded data and the kernel at the outer reduction tile, fetched cooperatively
    by the block's threads (fuse, then nparts splits by the thread counts); local caches of both
    at the middle reduction tile; padding inlined; unroll pragmas on the kernel scope (`nn`).

    Two differences from the template's text, neither changing the program:
    - `AL = s.cache_read(AA, "local", [OL])` (a cache of a cache, for the same reader) is written
      `AL = cache_read(pad_temp, "local", [OL])`, then `AA = cache_read(pad_temp, "shared", [AL])`:
      the same chain pad_temp -> shared -> local -> OL; autosched's cache_read redirects one level
      only, so the template's order leaves its local cache unread (see test_autotvm_schedule.py).
    - pad_temp is inlined after the cache_reads (ours refuses to cache an inlined stage; TVM's
      template inlines first, then caches the inlined tensor, which means the same).
    The template's `tile_rx` / `tile_ry` mix-up (it splits ry by tile_rx) is not copied.
    """
    out, OL = "conv2d_nchw", "conv2d_nchw.local"
    s = dag.get_init_state()
    s = s.cache_write(out, "local")
    for src in ("pad_temp", "kernel"):
        s = s.cache_read(src, "local", [OL])
        s = s.cache_read(src, "shared", [src + ".local"])
    s = s.compute_inline("pad_temp")
    axes = (("ff", "tile_f", "z"), ("yy", "tile_y", "y"), ("xx", "tile_x", "x"))
    for ax, key, _ in axes:
        s = s.split(out, ax, cfg[key][1:])  # -> ax_o_o_o (block), _o_o_i, _o_i, _i
    for level, thread in (("_o_o_o", "blockIdx."), ("_o_o_i", "vthread"), ("_o_i", "threadIdx.")):
        for ax, _, dim in axes:  # the template's order: bf, by, bx, vf, vy, vx, tf, ty, tx
            s = s.bind(out, ax + level, thread if thread == "vthread" else thread + dim)
    levels = ("_o_o_o", "_o_o_i", "_o_i", "_i")
    s = s.reorder(out, ["nn"] + [ax + lv for lv in levels for ax, _, _ in axes])
    s = s.compute_at(OL, out, "xx_o_i")
    reduce_axes = (("rc", "tile_rc"), ("ry", "tile_ry"), ("rx", "tile_rx"))
    for ax, key in reduce_axes:
        s = s.split(OL, ax, cfg[key][1:])  # -> ax_o_o, ax_o_i, ax_i
    order = [ax + lv for lv in ("_o_o", "_o_i", "_i") for ax, _ in reduce_axes]
    s = s.reorder(OL, order + ["nn_c", "ff_c", "yy_c", "xx_c"])
    for cache, loop in (("shared", "rx_o_o"), ("local", "rx_o_i")):
        for src in ("pad_temp", "kernel"):
            s = s.compute_at(f"{src}.{cache}", OL, loop)
    threads = [cfg[key][2] for _, key, _ in axes]
    for load in ("pad_temp.shared", "kernel.shared"):  # cooperative fetching
        s = s.fuse(load, ["ax0", "ax1", "ax2", "ax3"])
        s = s.split(load, s[load].iters[0].name, threads, inner_to_outer=False)
        for k, dim in enumerate("zyx"):
            s = s.bind(load, k, "threadIdx." + dim)
    s = s.pragma(out, "nn", "auto_unroll_max_step", cfg["auto_unroll_max_step"])
    if not cfg["unroll_explicit"]:  # the pragma above also sets unroll_explicit, as in TVM
        s = s.pragma(out, "nn", "unroll_explicit", 0)
    return s


# ---- small schedules (d)-(f), shared by the interpreter and GPU tests -------------------------


def fused_elementwise_dag(n=4, c=6, m=5) -> ComputeDAG:
    """`relu((x + y) * 2)` with a broadcast y (c, 1): three elementwise ops to fuse."""
    from autosched import topi

    x = te.placeholder((n, c, m), name="x")
    y = te.placeholder((c, 1), name="y")
    return ComputeDAG([x, y, topi.relu(topi.multiply(topi.add(x, y), 2.0))])


def fused_elementwise_state(dag: ComputeDAG, threads: int = 32) -> State:
    """Every op inlined into the output; its axes fused and split over blocks x `threads`
    (a guard where `threads` does not divide the size). The schedule of test_lowering.py."""
    s = dag.get_init_state()
    out = dag.tensors[-1].op.name
    for st in list(s.stages):
        if not st.is_placeholder and st.name != out:
            s = s.compute_inline(st.name)
    s = s.fuse(out, [it.name for it in s[out].iters])
    fused = s[out].iters[0].name
    s = s.split(out, fused, [threads])
    return s.bind(out, fused + "_o", "blockIdx.x").bind(out, fused + "_i", "threadIdx.x")


def softmax_dag(n=8, m=16) -> ComputeDAG:
    """`topi.nn.softmax` of an (n, m) matrix over its rows: max, exp, sum, divide."""
    from autosched import topi

    x = te.placeholder((n, m), name="x")
    return ComputeDAG([x, topi.nn.softmax(x)])


def softmax_multi_kernel_state(dag: ComputeDAG, threads: int = 64) -> State:
    """Softmax as four kernels, one per op: the two row reductions with a row per thread
    (rows split over blocks x `threads`), the two elementwise ops with their axes fused and
    split over blocks x `threads`."""
    s = dag.get_init_state()
    for red in ("T_softmax_maxelem", "T_softmax_expsum"):
        s = s.split(red, "i0", [threads])
        s = s.bind(red, "i0_o", "blockIdx.x").bind(red, "i0_i", "threadIdx.x")
    for ew in ("T_softmax_exp", "T_softmax_norm"):
        s = s.fuse(ew, ["i0", "i1"]).split(ew, "i0_i1_fused", [threads])
        s = s.bind(ew, "i0_i1_fused_o", "blockIdx.x").bind(ew, "i0_i1_fused_i", "threadIdx.x")
    return s


def non_dividing_split_state(dag: ComputeDAG, ti: int = 4, tj: int = 8, tk: int = 3) -> State:
    """`matmul_dag` with i, j, k split by factors that need not divide them (guards), i/j outer
    parts fused on blockIdx.x, inner parts on threadIdx.x, k serial. As in test_lowering.py."""
    s = dag.get_init_state()
    s = s.split("C", "i", [ti]).split("C", "j", [tj]).split("C", "k", [tk])
    s = s.reorder("C", ["i_o", "j_o", "i_i", "j_i", "k_o", "k_i"])
    s = s.fuse("C", ["i_o", "j_o"]).bind("C", "i_o_j_o_fused", "blockIdx.x")
    return s.fuse("C", ["i_i", "j_i"]).bind("C", "i_i_j_i_fused", "threadIdx.x")


# ---- the suite's workloads ------------------------------------------------------------------

# Sizes of the suite's workloads for the CPU interpreter: smaller than workloads.SUITE's reduced
# sizes where the interpreter would be slow, with the same structure (the same sketches, which
# test_sketch.py checks: e.g. dense keeps spatial < reduction, softmax keeps its reduction longer
# than a warp, the 7x7 stride-2 convolution keeps its padding and more outputs than reduction
# steps, with 2 input channels instead of 3 to halve the interpreter's serial reduction).
REDUCED = {
    "matmul": (16, 16, 16),
    "conv2d_bias_relu": (1, 5, 5, 8, 4, 3, 3, 1, 1),
    "conv2d_b16": (2, 6, 6, 4, 4, 3, 3, 1, 1),
    "depthwise": (1, 8, 10, 10, 3, 3, 1, 1),
    "batch_matmul": (2, 16, 16, 8),
    "dense_bias": (1, 48, 16),
    "softmax": (8, 64),
    "conv2d_7x7s2": (1, 16, 16, 4, 2, 7, 7, 2, 3),
}


def suite_dag(name: str, reduced: bool = False) -> ComputeDAG:
    """The DAG of suite workload `name` at its full size, or at its REDUCED size."""
    from autosched.task.workload_registry import lookup
    from autosched.task.workloads import SUITE

    workload, full, _ = SUITE[name]
    return ComputeDAG(lookup(workload)(*(REDUCED[name] if reduced else full)))
