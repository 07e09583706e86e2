"""Small DAGs and hand-written step lists shared by the loop-state / transform-step tests.

The conv2d+bias+relu DAG is the seeds' (ResNet-50's last 3x3 layer: N=1, 7x7, 512 -> 512,
stride 1, pad 1), with TVM's op and axis names: pad_temp, conv2d_nchw, T_add, compute.
`seed_conv_state` replays the seeds' best schedule as steps (TVM's step order and kinds).
"""

from __future__ import annotations

from autosched import te
from autosched.compute_dag import ComputeDAG
from autosched.loop_state import State

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
            data[i0, i1, i2 - pad, i3 - pad], te.const(0.0, "float32")),
        name="pad_temp",
    )
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    conv = te.compute(
        (n, co, h, w),
        lambda nn, ff, yy, xx: te.sum(
            pad_temp[nn, rc, yy + ry, xx + rx] * kernel[ff, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv2d_nchw",
    )
    t_add = te.compute((n, co, h, w), lambda ax0, ax1, ax2, ax3: conv[ax0, ax1, ax2, ax3]
                       + bias[ax0, ax1, 0, 0], name="T_add")
    out = te.compute((n, co, h, w), lambda i0, i1, i2, i3: te.max(
        t_add[i0, i1, i2, i3], te.const(0.0, "float32")), name="compute")
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
    "nn": (1, 1, 1, 1), "ff": (1, 32, 1, 1), "yy": (7, 1, 1, 1), "xx": (1, 1, 1, 1),
    "rc": (1, 2), "ry": (1, 3), "rx": (1, 3),
}
SEED_001_VECTORS = {"kernel.shared": 1, "pad_temp.shared": 2}
SEED_002_TILES = {
    "nn": (1, 1, 1, 1), "ff": (1, 64, 2, 1), "yy": (1, 1, 1, 1), "xx": (1, 1, 7, 1),
    "rc": (4, 2), "ry": (1, 1), "rx": (3, 1),
}
SEED_002_VECTORS = {"kernel.shared": 1, "pad_temp.shared": 1}


def seed_conv_state(dag: ComputeDAG, tiles=SEED_001_TILES, vectors=SEED_001_VECTORS,
                    unroll: int = 512) -> State:
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
    for ax, src in zip(("i0", "i1", "i2", "i3"), ("nn", "ff", "yy", "xx")):
        s = s.follow_split(relu, ax, split_ids[src], 3)
    s = s.reorder(relu, [f"{a}{suffix}" for suffix in ("_o_o_o", "_o_o_i", "_o_i", "_i")
                         for a in ("i0", "i1", "i2", "i3")])
    s = s.compute_at(conv, relu, "i3_o_i")
    s = s.cache_read("kernel", "shared", [conv])
    s = s.compute_at("kernel.shared", conv, "rx_o_o")
    s = s.cache_read("pad_temp", "shared", [conv])
    s = s.compute_at("pad_temp.shared", conv, "rx_o_o")
    s = s.compute_inline("pad_temp")
    for level, (suffix, thread) in enumerate(
            (("_o_o_o", "blockIdx.x"), ("_o_o_i", "vthread"), ("_o_i", "threadIdx.x"))):
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
