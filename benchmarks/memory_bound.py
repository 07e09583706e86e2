"""Memory-bound operators tuned, and their bandwidth against PyTorch eager and torch.compile.

Reductions, normalisations, matrix-vector products, pooling and an element-wise chain, compared
with PyTorch eager and `torch.compile` of the same function, in one process.

    python -m benchmarks.memory_bound --trials 64 --out runs/ [--quick] [--workloads NAME ...]
        [--row-clusters 2 4 8 16] [--single-pass ODDS] [--interleave-bytes N] [--publish]

Per workload: tune through `auto_schedule` (`--trials` records), run the best kernel and both
PyTorch versions on the same random inputs (ours checked against eager), then time the three by
GPU time: 100 calls captured in one CUDA graph on one stream, replayed 20 times, median
(benchmarks/timing.py, the suite's method), the inputs rotated past the L2 cache. Bandwidth is
the bytes each input read once and each output written once take (autosched.roofline), over
the time; the peak is the GPU's measured copy rate (`--peak-bandwidth` overrides it). A copy
that moves as many bytes (an element-wise kernel) is timed the same way beside them: at a few tens
of MB, launch, ramp-up and tail keep even a copy below the peak, and the row says how close ours
comes to what the GPU reaches at its size. Writes
OUT/memory_bound/results.json and .md, updated after each workload (with `--publish`, to
benchmarks/results/memory_bound/ and docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import autosched
from autosched import te, topi
from benchmarks import report
from benchmarks.report import Column, Results, Table

# ---- the operators, as tensor expressions ---------------------------------------------------


@autosched.register_workload(name="mb_sum")
def full_sum(M: int, N: int) -> list[te.Tensor]:
    """The sum of a whole matrix, as a (1,) tensor."""
    a = te.placeholder((M, N), name="A")
    i, j = te.reduce_axis((0, M), name="i"), te.reduce_axis((0, N), name="j")
    return [a, te.compute((1,), lambda z: te.sum(a[i, j], axis=[i, j]), name="total")]


@autosched.register_workload(name="mb_norm2")
def norm2(M: int, N: int) -> list[te.Tensor]:
    """The 2-norm of a whole matrix (topi.norm2d)."""
    a = te.placeholder((M, N), name="A")
    return [a, topi.norm2d(a)]


@autosched.register_workload(name="mb_row_sum")
def row_sum(M: int, N: int) -> list[te.Tensor]:
    a = te.placeholder((M, N), name="A")
    j = te.reduce_axis((0, N), name="j")
    return [a, te.compute((M,), lambda i: te.sum(a[i, j], axis=j), name="rows")]


@autosched.register_workload(name="mb_col_sum")
def col_sum(M: int, N: int) -> list[te.Tensor]:
    a = te.placeholder((M, N), name="A")
    i = te.reduce_axis((0, M), name="i")
    return [a, te.compute((N,), lambda j: te.sum(a[i, j], axis=i), name="cols")]


@autosched.register_workload(name="mb_layer_norm")
def layer_norm(M: int, N: int, moments: bool = False) -> list[te.Tensor]:
    """Layer norm over rows; with `moments`, its mean and variance from one pass over each row
    (topi.layer_norm's moments form), for rows too long to keep in a block's shared memory."""
    x = te.placeholder((M, N), name="x")
    gamma, beta = te.placeholder((N,), name="gamma"), te.placeholder((N,), name="beta")
    return [x, gamma, beta, topi.layer_norm(x, gamma, beta, moments=moments)]


@autosched.register_workload(name="mb_rms_norm")
def rms_norm(M: int, N: int) -> list[te.Tensor]:
    """x * rsqrt(mean(x^2) + 1e-6) * w over each row."""
    x, w = te.placeholder((M, N), name="x"), te.placeholder((N,), name="w")
    k = te.reduce_axis((0, N), name="k")
    ms = te.compute((M,), lambda i: te.sum(x[i, k] * x[i, k] * (1.0 / N), axis=k), name="ms")
    out = te.compute((M, N), lambda i, j: x[i, j] * te.rsqrt(ms[i] + 1e-6) * w[j], name="rms")
    return [x, w, out]


@autosched.register_workload(name="mb_gemv")
def gemv(N: int, K: int, dtype: str) -> list[te.Tensor]:
    """y = W x (W: N x K) summed in float32, y in W's dtype (as torch's F.linear returns it)."""
    w, x = (
        te.placeholder((N, K), name="W", dtype=dtype),
        te.placeholder((K,), name="x", dtype=dtype),
    )
    k = te.reduce_axis((0, K), name="k")
    acc = te.compute(
        (N,),
        lambda n: te.sum(te.cast(w[n, k], "float32") * te.cast(x[k], "float32"), axis=k),
        name="acc",
    )
    return [w, x, te.compute((N,), lambda n: te.cast(acc[n], dtype), name="y")]


@autosched.register_workload(name="mb_max_pool")
def max_pool(N: int, C: int, H: int, W: int) -> list[te.Tensor]:
    """2 x 2 max pooling, stride 2 (NCHW)."""
    x = te.placeholder((N, C, H, W), name="x")
    return [x, topi.nn.max_pool2d(x, 2, 2)]


@autosched.register_workload(name="mb_bias_relu_mul")
def bias_relu_mul(M: int, N: int) -> list[te.Tensor]:
    """relu(x + b) * x, b broadcast along the rows: three PyTorch ops, one kernel of ours."""
    x, b = te.placeholder((M, N), name="x"), te.placeholder((N,), name="b")
    y = te.compute((M, N), lambda i, j: te.max(x[i, j] + b[j], 0.0) * x[i, j], name="y")
    return [x, b, y]


# ---- the same in PyTorch: workload args -> function of the kernel's input tensors ------------


def _full_sum(args):
    return lambda a: a.sum().reshape(1)


def _norm2(args):
    import torch

    return lambda a: torch.linalg.vector_norm(a).reshape(1)


def _row_sum(args):
    return lambda a: a.sum(1)


def _col_sum(args):
    return lambda a: a.sum(0)


def _softmax(args):
    import torch

    return lambda x: torch.softmax(x, dim=-1)


def _layer_norm(args):
    import torch.nn.functional as F

    return lambda x, g, b: F.layer_norm(x, (args[1],), g, b, eps=1e-5)


def _rms_norm(args):
    import torch.nn.functional as F

    return lambda x, w: F.rms_norm(x, (args[1],), w, eps=1e-6)


def _gemv(args):
    import torch.nn.functional as F

    return lambda w, x: F.linear(x, w)


def _max_pool(args):
    import torch.nn.functional as F

    return lambda x: F.max_pool2d(x, 2, 2)


def _bias_relu_mul(args):
    import torch

    return lambda x, b: torch.relu(x + b) * x


@dataclass(frozen=True)
class Workload:
    """A benchmark row: a registered workload at one size, its PyTorch equivalent, whether
    `--quick` runs it, and a small size (same structure) the CPU tests check the two at."""

    workload: str
    args: tuple
    torch_fn: Callable
    quick: bool = False
    small: tuple = ()


MB = 1 << 20
WORKLOADS: dict[str, Workload] = {
    "sum_16384x4096": Workload("mb_sum", (16384, 4096), _full_sum, small=(8, 64)),
    "norm2_4096x4096": Workload("mb_norm2", (4096, 4096), _norm2, quick=True, small=(8, 64)),
    "row_sum_8x2M": Workload("mb_row_sum", (8, 1 << 21), _row_sum, small=(2, 256)),
    "row_sum_32768x512": Workload("mb_row_sum", (32768, 512), _row_sum, small=(16, 32)),
    "row_sum_256x1024": Workload("mb_row_sum", (256, 1024), _row_sum, small=(16, 32)),
    "col_sum_4096x4096": Workload("mb_col_sum", (4096, 4096), _col_sum, quick=True, small=(64, 8)),
    "softmax_16384x1024": Workload("softmax", (16384, 1024), _softmax, quick=True, small=(4, 32)),
    "softmax_256x32768": Workload("softmax", (256, 32768), _softmax, small=(2, 256)),
    "layer_norm_16384x1024": Workload("mb_layer_norm", (16384, 1024), _layer_norm, small=(4, 32)),
    "layer_norm_128x65536": Workload(
        "mb_layer_norm", (128, 65536, True), _layer_norm, small=(2, 256, True)
    ),
    "rms_norm_2048x4096": Workload(
        "mb_rms_norm", (2048, 4096), _rms_norm, quick=True, small=(4, 32)
    ),
    "rms_norm_16x262144": Workload("mb_rms_norm", (16, 1 << 18), _rms_norm, small=(2, 256)),
    "gemv_fp16_4096x4096": Workload(
        "mb_gemv", (4096, 4096, "float16"), _gemv, quick=True, small=(8, 64, "float16")
    ),
    "gemv_fp16_11008x4096": Workload(
        "mb_gemv", (11008, 4096, "float16"), _gemv, small=(8, 64, "float16")
    ),
    "gemv_fp16_4096x11008": Workload(
        "mb_gemv", (4096, 11008, "float16"), _gemv, small=(8, 64, "float16")
    ),
    "gemv_fp32_4096x4096": Workload(
        "mb_gemv", (4096, 4096, "float32"), _gemv, small=(8, 64, "float32")
    ),
    "max_pool_32x128x112x112": Workload(
        "mb_max_pool", (32, 128, 112, 112), _max_pool, small=(1, 2, 8, 8)
    ),
    "bias_relu_mul_8192x8192": Workload(
        "mb_bias_relu_mul", (8192, 8192), _bias_relu_mul, quick=True, small=(4, 32)
    ),
}


def task_of(name: str, small: bool = False):
    """The search task of a benchmark row (at its small size for the CPU tests)."""
    w = WORKLOADS[name]
    return autosched.SearchTask(w.workload, w.small if small else w.args)


# ---- tuning and timing (GPU) ----------------------------------------------------------------


def sketch_params_of(task, ns):
    """The task's SketchParams, with the cluster sizes of `--row-clusters` (normalisations'
    rows also split over thread-block clusters of that many blocks, sm_90), the odds of
    `--single-pass` (a cross-block reduction's parts summed by its last block) and the chunk of
    `--interleave-bytes` (its parts also interleaved, a grid-stride order; 0: never)."""
    from autosched.sketch import SketchParams

    params = SketchParams.for_task(task)
    if ns.row_clusters is not None:
        params = replace(params, row_cluster_sizes=tuple(ns.row_clusters))
    if ns.single_pass is not None:
        params = replace(params, cross_block_single_pass=ns.single_pass)
    if ns.interleave_bytes is not None:
        params = replace(params, cross_block_interleave_bytes=ns.interleave_bytes)
    return params


def tune(name: str, ns) -> tuple:
    """Tune `name` up to `ns.trials` records in `ns.out/<name>.json`. Returns (task, best state,
    its recorded seconds, records in the log, wall seconds)."""
    from autosched.records import load_best, load_records
    from autosched.search.policy import SearchParams, SketchPolicy

    task = task_of(name)
    sketch_params = sketch_params_of(task, ns)
    log = os.path.join(ns.out, f"{name}.json")
    done = sum(1 for _ in load_records(log)) if os.path.exists(log) else 0
    t0 = time.perf_counter()
    if ns.trials > done:
        search = SearchParams(n_jobs=ns.n_jobs)
        policy = SketchPolicy(task, autosched.XGBModel(), search, sketch_params=sketch_params)
        options = autosched.TuningOptions(
            num_measure_trials=ns.trials - done,
            num_measures_per_round=ns.per_round,
            measure_callbacks=[autosched.RecordToFile(log)],
        )
        autosched.auto_schedule(task, policy, options)
    wall = time.perf_counter() - t0
    inp, res = load_best(log, task.workload_key)
    state = task.compute_dag.replay_steps(inp.steps)
    return task, state, res.mean_cost, sum(1 for _ in load_records(log)), wall


def compare(name: str, kernel, seed: int = 0) -> dict:
    """Our kernel, PyTorch eager and torch.compile on the same inputs: ours checked against
    eager, then GPU time of the three (µs), and of a copy that moves as many bytes (`copy_us`):
    what the GPU reaches at this size, launch and tail included."""
    import torch

    from benchmarks.timing import kernel_rotation_copies, shared_stream, time_graph

    w = WORKLOADS[name]
    eager = w.torch_fn(w.args)
    compiled = torch.compile(eager)
    temps = {b.name for b in kernel.program.temps}
    inputs = [a for a in kernel.args if not a.is_output and a.name not in temps]
    outputs = [a for a in kernel.args if a.is_output]
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def tensor(a, fill: bool):
        t = torch.empty(a.shape, dtype=getattr(torch, a.dtype), device="cuda")
        return t.uniform_(-1, 1, generator=gen) if fill else t

    sets = [
        ([tensor(a, True) for a in inputs], [tensor(a, False) for a in outputs])
        for _ in range(kernel_rotation_copies(kernel))
    ]
    launchers = [kernel.launcher(*ins, *outs) for ins, outs in sets]
    expected = eager(*sets[0][0]).float()
    sets[0][1][0].fill_(float("nan"))
    launchers[0]()
    torch.cuda.synchronize()
    got = sets[0][1][0].float().reshape(expected.shape)
    scale = float(expected.abs().max()) or 1.0
    err = float((got - expected).abs().max()) / scale
    tolerance = 2e-2 if inputs[0].dtype in ("float16", "bfloat16") else 2e-3
    ours_stream, stream = shared_stream()
    ours = [lambda launch=launch: launch(ours_stream) for launch in launchers]
    theirs = [lambda ins=ins: eager(*ins) for ins, _ in sets]
    theirs_compiled = [lambda ins=ins: compiled(*ins) for ins, _ in sets]
    copies = same_size_copies(sum(a.nbytes for a in inputs + outputs), len(sets))
    return {
        "ours_us": time_graph(ours, stream=stream) * 1e6,
        "eager_us": time_graph(theirs, stream=stream) * 1e6,
        "compile_us": time_graph(theirs_compiled, stream=stream) * 1e6,
        "copy_us": time_graph(copies, stream=stream) * 1e6,
        "max_rel_err_vs_torch": err,
        "matches_torch": bool(torch.isfinite(got).all()) and err <= tolerance,
    }


def same_size_copies(moved: int, rotation: int) -> list[Callable[[], object]]:
    """Copies of moved / 2 bytes each (half read, half written: `moved` in all), over
    `rotation` buffer pairs as our kernel's inputs rotate, so each copy reads from DRAM as the
    operator does. The copy is an element-wise kernel (a negation), which runs on the SMs as
    ours does: `copy_` of a contiguous tensor is a memcpy, whose time in a CUDA graph varied
    between rows of the same size."""
    import torch

    floats = max(1, moved // 2 // 4)
    pairs = [
        (torch.rand(floats, device="cuda"), torch.empty(floats, device="cuda"))
        for _ in range(rotation)
    ]
    return [lambda src=src, dst=dst: torch.neg(src, out=dst) for src, dst in pairs]


# ---- the tables (no GPU) --------------------------------------------------------------------

COLUMNS = [
    Column("workload"),
    Column("MB moved", "{:.1f}"),
    Column("autosched µs", "{:.1f}"),
    Column("eager µs", "{:.1f}"),
    Column("torch.compile µs", "{:.1f}"),
    Column("autosched GB/s", "{:.0f}"),
    Column("% of peak", "{:.0f}"),
    Column("copy µs", "{}"),
    Column("% of a copy's speed", "{}"),
    Column("eager % / compile % of peak"),
    Column("best torch / ours speed", "{:.2f}"),
    Column("trials"),
    Column("matches torch"),
]
NOTE = (
    "Bytes moved: each input read once and each output written once; % of peak against the"
    " GPU's measured copy bandwidth (peak column of the runs). eager: PyTorch's own kernels;"
    " torch.compile: the default inductor backend, the same function. Speed above 1: ours faster"
    " than the faster of the two. copy: PyTorch's element-wise negation moving as many bytes"
    " (half read, half written), timed the same way: the rate a simple kernel of this size"
    " reaches, launch and tail included; % of a copy's speed: copy time over ours."
)


def row(r: dict) -> list:
    """One table row from one run's figures."""
    gbps = r["bytes"] / r["ours_us"] / 1e3
    percent = {
        k: 100 * r["bytes"] / r[k] / 1e-6 / r["peak_bandwidth"] for k in r if k.endswith("_us")
    }
    return [
        r["name"],
        r["bytes"] / MB,
        r["ours_us"],
        r["eager_us"],
        r["compile_us"],
        gbps,
        percent["ours_us"],
        f"{r['copy_us']:.1f}" if "copy_us" in r else "-",
        f"{100 * r['copy_us'] / r['ours_us']:.0f}" if "copy_us" in r else "-",
        f"{percent['eager_us']:.0f} / {percent['compile_us']:.0f}",
        min(r["eager_us"], r["compile_us"]) / r["ours_us"],
        r["trials"],
        r["matches_torch"],
    ]


def memory_bound_results(runs: list[dict]) -> Results:
    """The memory_bound folder's document: one table per machine, commit and command."""
    tables = []
    for (where, commit, command), group in report.runs_by(
        runs, "machine", "commit", "command"
    ).items():
        peak = group[0]["peak_bandwidth"] / 1e9
        title = f"Memory-bound operators: GB/s against a {peak:.0f} GB/s peak"
        tables.append(Table(title, where, commit, command, COLUMNS, [row(r) for r in group], NOTE))
    return Results("memory_bound", "Memory-bound operators against PyTorch", tables, runs)


def selected(ns) -> list[str]:
    """The rows to run: --workloads, else the --quick subset, else all."""
    if ns.workloads:
        return ns.workloads
    return [n for n, w in WORKLOADS.items() if w.quick or not ns.quick]


def main(argv: list[str] | None = None) -> int:
    assert __doc__ is not None
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="*", default=None, choices=list(WORKLOADS))
    ap.add_argument("--quick", action="store_true", help="the six rows marked quick")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--n-jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--peak-bandwidth", type=float, default=None, help="bytes/s (default: GPU's)")
    ap.add_argument(
        "--row-clusters",
        type=int,
        nargs="*",
        default=None,
        choices=(2, 4, 8, 16),
        help="the cluster sizes normalisations' rows are also sketched split over (sm_90; "
        "default: SketchParams'; no sizes: none)",
    )
    ap.add_argument(
        "--single-pass",
        type=float,
        default=None,
        help="the odds that a cross-block reduction's parts are summed by its last block, in "
        "one kernel (default: SketchParams'; 0: two kernels always, 1: one where it can)",
    )
    ap.add_argument(
        "--interleave-bytes",
        type=int,
        default=None,
        help="the chunk a cross-block reduction's parts are also sketched interleaved by (each "
        "block reads every P-th chunk: a grid-stride loop; default: SketchParams'; 0: "
        "contiguous parts only)",
    )
    report.add_publishing_arguments(ap, "memory_bound", "bench_out")
    ns = ap.parse_args(argv)
    from autosched.roofline import dag_bytes, peak_for

    os.makedirs(ns.out, exist_ok=True)
    where: dict = report.provenance("benchmarks.memory_bound", ns.commit, argv)
    where["peak_bandwidth"] = peak_for(where["machine"], bandwidth=ns.peak_bandwidth).bandwidth
    runs = []
    for name in selected(ns):
        task, state, recorded, trials, wall = tune(name, ns)
        compared = report.compared_kernel(name, task, state, ns.out, compare)
        if compared is None:
            continue
        _, timed = compared
        runs.append(
            {
                "name": name,
                "bytes": dag_bytes(task.compute_dag),
                "trials": trials,
                "wall_s": wall,
                "record_us": recorded * 1e6,
                **timed,
                **where,
            }
        )
        report.write_results(memory_bound_results(runs), root=ns.out)  # kept if cut short
        print(f"{name}: {row(runs[-1])}", flush=True)
    report.finish(memory_bound_results(runs), ns.publish)
    return 0


if __name__ == "__main__":
    sys.exit(main())
