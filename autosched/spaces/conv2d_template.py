"""The conv2d template of TVM's AutoTVM CUDA tutorial (`tutorial/conv2d_no_batching`), with its
eight knobs, written as autosched State steps. Importing this module registers it.

The schedule: 4-level tiling of f, y, x bound to blockIdx / vthread / threadIdx; a local
accumulator computed at threadIdx.x; 3-level tiling of rc, ry, rx; shared caches of the padded
data and the kernel at the outer reduction tile, fetched cooperatively by the block's threads;
local caches at the middle tile; padding inlined; the unroll pragmas on the kernel scope.
Two spellings differ from the tutorial's text, not its program: the local and shared caches
are created reader first (autosched's cache_read redirects one level), and padding is inlined
after caching. Its `tile_rx`/`tile_ry` mix-up is not copied.
"""

from __future__ import annotations

from autosched import te, topi
from autosched.spaces.template import template

OUT, LOCAL = "conv2d_nchw", "conv2d_nchw.local"


@template("tutorial/conv2d_no_batching")
def conv2d_no_batching(cfg, N, H, W, CO, CI, KH, KW, stride, padding):
    """The tutorial's template: returns the State of config `cfg`."""
    assert N == 1, "Only consider batch_size = 1 in this template"
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    s = cfg.create_schedule([data, kernel, conv])

    # ---- space definition ----
    _, f, y, x, rc, ry, rx = s[OUT].iters
    cfg.define_split("tile_f", f, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=3)
    cfg.define_split("tile_ry", ry, num_outputs=3)
    cfg.define_split("tile_rx", rx, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])

    # ---- caches, padding inlined ----
    s = s.cache_write(OUT, "local")
    for src in ("pad_temp", "kernel"):
        s = s.cache_read(src, "local", [LOCAL])
        s = s.cache_read(src, "shared", [src + ".local"])
    s = s.compute_inline("pad_temp")

    # ---- tile and bind the spatial axes ----
    tiles = {}
    for ax, key in (("ff", "tile_f"), ("yy", "tile_y"), ("xx", "tile_x")):
        s, tiles[key] = cfg[key].apply(s, OUT, ax)
    (bf, vf, tf, fi), (by, vy, ty, yi), (bx, vx, tx, xi) = tiles.values()
    for loop, thread in (
        (bf, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
        (vf, "vthread"), (vy, "vthread"), (vx, "vthread"),
        (tf, "threadIdx.z"), (ty, "threadIdx.y"), (tx, "threadIdx.x"),
    ):  # fmt: skip
        s = s.bind(OUT, loop, thread)
    s = s.reorder(OUT, ["nn", bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi])
    s = s.compute_at(LOCAL, OUT, tx)

    # ---- tile the reduction axes ----
    s, (rco, rcm, rci) = cfg["tile_rc"].apply(s, LOCAL, "rc")
    s, (ryo, rym, ryi) = cfg["tile_ry"].apply(s, LOCAL, "ry")
    s, (rxo, rxm, rxi) = cfg["tile_rx"].apply(s, LOCAL, "rx")
    spatial = ["nn_c", "ff_c", "yy_c", "xx_c"]
    s = s.reorder(LOCAL, [rco, ryo, rxo, rcm, rym, rxm, rci, ryi, rxi, *spatial])
    for cache, loop in (("shared", rxo), ("local", rxm)):
        for src in ("pad_temp", "kernel"):
            s = s.compute_at(f"{src}.{cache}", LOCAL, loop)

    # ---- cooperative fetching ----
    threads = [cfg[key].size[2] for key in ("tile_f", "tile_y", "tile_x")]
    for load in ("pad_temp.shared", "kernel.shared"):
        s = s.fuse(load, ["ax0", "ax1", "ax2", "ax3"])
        s = s.split(load, s[load].iters[0].name, threads, inner_to_outer=False)
        for k, dim in enumerate("zyx"):
            s = s.bind(load, k, "threadIdx." + dim)

    # ---- tune unroll ----
    s = s.pragma(OUT, "nn", "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)
    if not cfg["unroll_explicit"].val:  # the pragma above also sets unroll_explicit, as in TVM
        s = s.pragma(OUT, "nn", "unroll_explicit", 0)
    return s
