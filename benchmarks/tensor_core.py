"""Tune fp16 / bf16 workloads (Tensor Core sketches), and fp32 ones with TF32 allowed, and
compare with PyTorch's half-precision (or TF32) kernels (cuBLAS / cuDNN on Tensor Cores) in one
process.

    python -m benchmarks.tensor_core --trials 1000 --out runs/ [--workloads NAME_OR_GROUP ...]
        [--resume FOLDER_OF_EARLIER_LOGS] [--publish]
        [--instructions wmma mma wgmma] [--pipeline-stages 2 3 4 5]
        [--fragment-double-buffers off on] [--operand-copy cp.async tma] [--tma-im2col off|on]
        [--epilogue-vectors off on] [--narrow-epilogue-tiles off on] [--warp-specialize off on]

`--instructions`, `--pipeline-stages`, `--fragment-double-buffers`, `--operand-copy` and
`--epilogue-vectors` restrict what the search draws (SketchParams' tensor_core_instructions,
pipeline_stages, fragment_double_buffers, operand_copies and epilogue_vectors; default: wmma,
mma and wgmma, every slot count, both, cp.async and TMA, both): `--instructions wmma`,
`--instructions mma` and `--instructions wgmma` (Hopper's warpgroup MMA, drawn only on sm_90
where warpgroups can compute the block tile) in three --out folders compare the instruction
families; `--fragment-double-buffers off` and `on` compare the
register double buffering of mma fragments; `--operand-copy tma` (with `--instructions wgmma`)
draws TMA box copies for a wgmma stage's shared tiles wherever they fit them (and double-buffers
every shared tile, as TMA feeds pipelined tiles only), `--operand-copy cp.async tma` (the
default) either, `--operand-copy cp.async` never. `--tma-im2col on` (the default) lets TMA's
im2col mode copy a conv's gathered input (3x3 windows, strides, padding) where TMA is drawn,
with a sketch that pipelines a 3x3's taps and K tiles in one loop (`SketchParams.tma_im2col`);
`off` keeps such convs on cp.async.
`--epilogue-vectors on` copies every epilogue out in 16-byte vectors where it may (sm_90),
`off` one element a thread. `--narrow-epilogue-tiles on` keeps such an epilogue's shared tile
in the 16-bit output type wherever it only casts (mma and wgmma), `off` in float32.
`--warp-specialize on` gives every TMA-fed wgmma stage a producer warpgroup (the consumers
release slots through mbarriers, no block barrier in the mainloop:
`SketchParams.warp_specializations`), `off` never; default both.
The table's "instructions" column says what the best kernel uses.

Workload groups (`GROUPS`): `core` (the seeds' products and convs, TF32), `awkward` (extents
that are not multiples of 16, attention scores of 77 tokens, a batch-8 conv of 64 channels),
`resnet50` (a representative subset of ResNet-50's NHWC convs at batch 1 and 32, implicit
GEMM) and `resnet50_convs` (every distinct 3x3 and 1x1 conv of ResNet-50, strides 1 and 2, at
batch 1 and 32: 40 workloads, 64 trials each unless `--trials` says otherwise; its tables go
to the `resnet50_convs` results folder, with the geometric mean of torch µs / ours µs per
batch and the count of tensorized kernels); the default is `core`.

    python -m benchmarks.tensor_core --workloads resnet50_convs --out runs/ --publish

Per workload: tune through `auto_schedule` (no hand-written schedule), check that the best kernel
is tensorized, run it and PyTorch on the same random inputs (ours checked against PyTorch's
output), then time both by GPU time: 100 calls captured in one CUDA graph on one stream, replayed
20 times, median (benchmarks/timing.py, the suite's method); inputs rotated past the L2
cache (the headline), and the same inputs every call (as the search's runner times, beside the
search's own record). Writes the tables to OUT/tensor_cores/results.json and .md (the
`resnet50_convs` group's rows to OUT/resnet50_convs/), updated after each workload (with
`--publish`, to benchmarks/results/<folder>/ and docs/PERFORMANCE.md); a `resnet50_convs` run
ends by printing one summary line per batch size.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time

from autosched.task.workloads import RESNET50_CONVS, resnet50_conv_args
from benchmarks import report
from benchmarks.kernel_summary import instructions, tensorized
from benchmarks.report import write_results
from benchmarks.tensor_core_tables import resnet50_conv_results, summary_line, tensor_core_results
from benchmarks.timing import TORCH_EQUIVALENTS


def _conv2d_nhwc(args):
    """Ours: data NHWC, kernel (KH, KW, CI, CO), output NHWC. PyTorch's conv in channels_last
    takes the same memory: NHWC data is an NCHW tensor in channels_last layout; the weight is
    converted once, outside the timed call (it is a parameter)."""
    N, H, W, CO, CI, KH, KW, stride, pad = args
    import torch.nn.functional as F

    cache: dict = {}

    def run(x, w):
        key = w.data_ptr()
        if key not in cache:
            import torch

            cache[key] = w.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        y = F.conv2d(x.permute(0, 3, 1, 2), cache[key], stride=stride, padding=pad)
        return y.permute(0, 2, 3, 1)

    return run


def _conv2d_nchw(args):
    """Ours and PyTorch's take the same NCHW data and OIHW kernel."""
    N, CI, H, W, CO, KH, KW, stride, pad = args
    import torch.nn.functional as F

    return lambda x, w: F.conv2d(x, w, stride=stride, padding=pad)


def _conv2d_nhwcnc(args):
    """Ours: the seed's blocked layouts (data (N/16, H, W, CI/16, 16 n, 16 ci), kernel (KH, KW,
    CI/16, CO/16, 16 ci, 16 co), output likewise). PyTorch's conv on the same values: the
    operands unblocked to NCHW / OIHW and its output blocked back, inside the timed call (the
    copies are part of what PyTorch needs to serve this layout)."""
    N, H, W, CO, CI, KH, KW, pad = args
    import torch.nn.functional as F

    def run(x, w):
        data = x.permute(0, 4, 3, 5, 1, 2).reshape(N, CI, H, W)
        kernel = w.permute(3, 5, 2, 4, 0, 1).reshape(CO, CI, KH, KW)
        y = F.conv2d(data, kernel, padding=pad)
        return y.reshape(N // 16, 16, CO // 16, 16, H, W).permute(0, 4, 5, 2, 1, 3)

    return run


def _attention(args):
    """Ours and PyTorch's scaled_dot_product_attention take the same (BH, S, D) q, k and v, with
    the default scale 1/sqrt(D); causal as the workload's last argument. PyTorch gets them as
    (1, BH, S, D): its fused (flash / memory-efficient) kernels take 4-D inputs only, and a 3-D
    call would time its unfused fallback instead."""
    causal = bool(args[4])
    import torch.nn.functional as F

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]

    return sdpa


def _tf32(torch_fn):
    """PyTorch's equivalent with TF32 matrix products allowed while it runs (and is captured),
    as the search's TF32 option allows ours."""

    def make(args):
        fn = torch_fn(args)

        def run(*tensors):
            import torch

            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                return fn(*tensors)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before

        return run

    return make


# benchmark name -> (registered workload, its args, PyTorch equivalent); TF32 ones are fp32
# workloads tuned with `allow_tf32` and compared with PyTorch's TF32
WORKLOADS: dict[str, tuple[str, tuple, object]] = {
    "matmul_fp16_1024": ("matmul_fp16", (1024, 1024, 1024), TORCH_EQUIVALENTS["matmul"]),
    "matmul_fp16_4096": ("matmul_fp16", (4096, 4096, 4096), TORCH_EQUIVALENTS["matmul"]),
    "batch_matmul_bf16": (
        "batch_matmul_bf16",
        (16, 512, 512, 64),
        TORCH_EQUIVALENTS["batch_matmul"],
    ),
    "conv2d_nhwc_fp16": ("conv2d_nhwc_fp16", (256, 14, 14, 512, 256, 3, 3, 1, 1), _conv2d_nhwc),
    "matmul_tf32_1024": ("matmul", (1024, 1024, 1024), _tf32(TORCH_EQUIVALENTS["matmul"])),
    "conv2d_nchw_fp16": (
        "conv2d_nchw_fp16",
        (256, 256, 14, 14, 512, 3, 3, 1, 1),
        _conv2d_nchw,
    ),
    "conv2d_nhwcnc_fp16": ("conv2d_nhwcnc_fp16", (256, 14, 14, 512, 256, 3, 3, 1), _conv2d_nhwcnc),
    # attention as one task (topi.attention): ViT-B/16, BERT-base, a causal decoder layer
    "attention_vit_fp16": ("attention_fp16", (12, 197, 197, 64, 0), _attention),
    "attention_bert_fp16": ("attention_fp16", (12, 128, 128, 64, 0), _attention),
    "attention_causal_fp16": ("attention_fp16", (32, 1024, 1024, 64, 1), _attention),
    "attention_vit_bf16": ("attention_bf16", (12, 197, 197, 64, 0), _attention),
}
TF32 = {"matmul_tf32_1024"}

# extents that are not multiples of 16 (padded tiles), few output tiles, implicit GEMM
AWKWARD: dict[str, tuple[str, tuple, object]] = {
    "matmul_fp16_1000": ("matmul_fp16", (1000, 1000, 1000), TORCH_EQUIVALENTS["matmul"]),
    "matmul_fp16_1023x999x1001": (
        "matmul_fp16",
        (1023, 999, 1001),
        TORCH_EQUIVALENTS["matmul"],
    ),
    "attention_scores_fp16_77": (
        "batch_matmul_fp16",
        (96, 77, 77, 64),
        TORCH_EQUIVALENTS["batch_matmul"],
    ),
    "conv2d_nhwc_fp16_b8_56_64": (
        "conv2d_nhwc_fp16",
        (8, 56, 56, 64, 64, 3, 3, 1, 1),
        _conv2d_nhwc,
    ),
}


def _resnet50(batch: int, conv: tuple[int, ...]) -> tuple[str, tuple[str, tuple, object]]:
    hw, ci, co, k, stride, _ = conv
    name = f"resnet50_b{batch}_{hw}_{ci}x{co}_{k}x{k}s{stride}"
    return name, ("conv2d_nhwc_fp16", resnet50_conv_args(batch, conv), _conv2d_nhwc)


# ResNet-50's convs, a representative subset: the 3x3 of each stage, a strided 3x3 and three
# 1x1 (expand, reduce, the widest), at batch 1 (M = H*W pixels) and 32
RESNET50_SUBSET = tuple(RESNET50_CONVS[i] for i in (1, 2, 7, 10, 12, 14, 17, 18))
RESNET50 = dict(_resnet50(b, c) for b in (1, 32) for c in RESNET50_SUBSET)
# all of them: every distinct 3x3 and 1x1 conv past the stem, at batch 1 and 32
RESNET50_ALL = dict(_resnet50(b, c) for b in (1, 32) for c in RESNET50_CONVS)
GROUPS = {
    "core": list(WORKLOADS),
    "awkward": list(AWKWARD),
    "resnet50": list(RESNET50),
    "resnet50_convs": list(RESNET50_ALL),
}
WORKLOADS.update(AWKWARD)
WORKLOADS.update(RESNET50_ALL)
# trials per workload where `--trials` is not given: a group of many workloads gets fewer,
# so that one run fits a few minutes per workload set on one GPU (see `default_trials`)
DEFAULT_TRIALS = 1000
GROUP_TRIALS = {"resnet50_convs": 64}


def expand_names(names: list[str]) -> list[str]:
    """Workload names, each group name replaced by its workloads (in order, once each)."""
    out: list[str] = []
    for name in names:
        for w in GROUPS.get(name, [name]):
            if w not in out:
                out.append(w)
    return out


def default_trials(names: list[str]) -> int:
    """The trials per workload when --trials is not given: the smallest of `GROUP_TRIALS` where
    every name asked for is such a group, else `DEFAULT_TRIALS`."""
    if names and all(n in GROUP_TRIALS for n in names):
        return min(GROUP_TRIALS[n] for n in names)
    return DEFAULT_TRIALS


def documents(runs: list[dict], conv_names: set[str]) -> list:
    """The results documents of `runs`: the ResNet-50 conv group's rows (`conv_names`) in their
    own, every other row in the tensor_cores one; only those with rows."""
    convs = [r for r in runs if r["name"] in conv_names]
    others = [r for r in runs if r["name"] not in conv_names]
    docs = [tensor_core_results(others)] if others else []
    return docs + ([resnet50_conv_results(convs)] if convs else [])


def tune(name: str, ns) -> tuple:
    """Tune `name` up to `ns.trials` records in `ns.out/<name>.json`; with `--resume DIR`, start
    from DIR/<name>.json (copied; the model trained on it, its states never measured again).
    Returns (task, best state, its recorded seconds, records in the log, wall seconds)."""
    import autosched
    from autosched.records import load_best, load_records
    from autosched.search.policy import PreloadMeasuredStates, SearchParams, SketchPolicy
    from autosched.sketch import SketchParams

    workload, args, _ = WORKLOADS[name]
    task = autosched.SearchTask(workload, args, allow_tf32=name in TF32)
    log = os.path.join(ns.out, f"{name}.json")
    model, callbacks, done = autosched.XGBModel(), [], 0
    earlier = os.path.join(ns.resume, f"{name}.json") if ns.resume else None
    if earlier and os.path.exists(earlier):
        shutil.copyfile(earlier, log)
        done = sum(1 for _ in load_records(log))
        model.update_from_file(log)
        callbacks = [PreloadMeasuredStates(log)]
    t0 = time.perf_counter()
    if ns.trials > done:
        params = SearchParams(n_jobs=ns.n_jobs, seed=ns.seed)
        sketch_params = dataclasses.replace(
            SketchParams.for_task(task),
            tensor_core_instructions=tuple(ns.instructions),
            pipeline_stages=tuple(ns.pipeline_stages),
            fragment_double_buffers=tuple(x == "on" for x in ns.fragment_double_buffers),
            operand_copies=tuple(ns.operand_copy),
            tma_im2col=ns.tma_im2col == "on",
            epilogue_vectors=tuple(x == "on" for x in ns.epilogue_vectors),
            narrow_epilogue_tiles=tuple(x == "on" for x in ns.narrow_epilogue_tiles),
            warp_specializations=tuple(x == "on" for x in ns.warp_specialize),
        )
        if ns.operand_copy == ["tma"]:  # TMA feeds pipelined tiles only: pipeline them all
            sketch_params = dataclasses.replace(sketch_params, double_buffer_probability=1.0)
        policy = SketchPolicy(
            task, model, params, init_search_callbacks=callbacks, sketch_params=sketch_params
        )
        autosched.auto_schedule(
            task,
            policy,
            autosched.TuningOptions(
                num_measure_trials=ns.trials - done,
                num_measures_per_round=ns.per_round,
                measure_callbacks=[autosched.RecordToFile(log)],
            ),
        )
    wall = time.perf_counter() - t0
    inp, res = load_best(log, task.workload_key)
    state = task.compute_dag.replay_steps(inp.steps)
    total = sum(1 for _ in load_records(log))
    return task, state, res.mean_cost, total, wall


def compare(name: str, kernel, seed: int = 0) -> dict:
    """Our kernel and PyTorch's on the same inputs: the check, then GPU time of both."""
    import torch

    from benchmarks.timing import kernel_rotation_copies, shared_stream, time_graph

    _, args, torch_fn = WORKLOADS[name]
    fn = torch_fn(args)
    temps = {b.name for b in kernel.program.temps}
    inputs = [a for a in kernel.args if not a.is_output and a.name not in temps]
    outputs = [a for a in kernel.args if a.is_output]
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def tensor(a, fill: bool):
        t = torch.empty(a.shape, dtype=getattr(torch, a.dtype), device="cuda")
        return t.uniform_(-1, 1, generator=gen) if fill else t

    copies = kernel_rotation_copies(kernel)
    sets = [
        ([tensor(a, True) for a in inputs], [tensor(a, False) for a in outputs])
        for _ in range(copies)
    ]
    launchers = [kernel.launcher(*ins, *outs) for ins, outs in sets]
    expected = fn(*sets[0][0]).float()
    sets[0][1][0].fill_(float("nan"))
    launchers[0]()
    torch.cuda.synchronize()
    got = sets[0][1][0].float()
    scale = float(expected.abs().max()) or 1.0
    err = float((got - expected).abs().max()) / scale
    ok = bool(torch.isfinite(got).all()) and err <= 2e-2
    ours_stream, stream = shared_stream()
    ours = [lambda launch=launch: launch(ours_stream) for launch in launchers]
    theirs = [lambda ins=ins: fn(*ins) for ins, _ in sets]
    return {
        "ours_us": time_graph(ours, stream=stream) * 1e6,
        "torch_us": time_graph(theirs, stream=stream) * 1e6,
        # the same inputs every call (L2-warm), as the search's runner times candidates
        "ours_same_inputs_us": time_graph(ours[:1], stream=stream) * 1e6,
        "torch_same_inputs_us": time_graph(theirs[:1], stream=stream) * 1e6,
        "max_rel_err_vs_torch": err,
        "matches_torch": ok,
        "input_copies": copies,
    }


def add_on_off(ap, flag: str, help_text: str) -> None:
    """An option of one or both of "off" and "on" (default both: the search draws either)."""
    ap.add_argument(flag, nargs="+", default=["off", "on"], choices=["off", "on"], help=help_text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--workloads",
        nargs="*",
        default=["core"],
        choices=[*GROUPS, *WORKLOADS],
        help="workloads or groups (core, awkward, resnet50, resnet50_convs)",
    )
    ap.add_argument(
        "--trials",
        type=int,
        default=None,
        help=f"trials per workload (default {DEFAULT_TRIALS}; {GROUP_TRIALS} for those groups)",
    )
    ap.add_argument("--per-round", type=int, default=64)
    ap.add_argument("--n-jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--resume", default=None, help="folder of earlier logs (<name>.json) to continue from"
    )
    ap.add_argument(
        "--instructions",
        nargs="+",
        default=["wmma", "mma", "wgmma"],
        choices=["wmma", "mma", "wgmma"],
        help="the Tensor Core instruction families the search draws (wgmma: Hopper only)",
    )
    ap.add_argument(
        "--pipeline-stages",
        nargs="+",
        type=int,
        default=[2, 3, 4, 5],
        choices=[2, 3, 4, 5],
        help="the shared-memory slot counts a double-buffered Tensor Core stage is drawn from",
    )
    add_on_off(
        ap,
        "--fragment-double-buffers",
        "whether mma fragments are double-buffered in registers (where they may be)",
    )
    ap.add_argument(
        "--operand-copy",
        nargs="+",
        default=["cp.async", "tma"],
        choices=["cp.async", "tma"],
        help="how a wgmma stage's shared tiles are copied (tma: Hopper, where it fits the tiles)",
    )
    ap.add_argument(
        "--tma-im2col",
        default="on",
        choices=["off", "on"],
        help="whether TMA im2col copies may feed convs (3x3, strided: SketchParams.tma_im2col)",
    )
    add_on_off(
        ap,
        "--epilogue-vectors",
        "whether a Tensor Core epilogue stores 16-byte vectors (sm_90, where it may)",
    )
    add_on_off(
        ap,
        "--narrow-epilogue-tiles",
        "whether a vector epilogue that only casts keeps its shared tile in 16 bits (sm_90)",
    )
    add_on_off(
        ap,
        "--warp-specialize",
        "whether a TMA-fed wgmma stage gets a producer warpgroup (sm_90, where TMA is drawn)",
    )
    report.add_publishing_arguments(ap, "tensor_cores", "bench_out")
    ns = ap.parse_args(argv)
    if ns.trials is None:
        ns.trials = default_trials(ns.workloads)
    os.makedirs(ns.out, exist_ok=True)
    conv_names = set(GROUPS["resnet50_convs"]) if "resnet50_convs" in ns.workloads else set()
    where = report.provenance("benchmarks.tensor_core", ns.commit, argv)
    runs = []
    for name in expand_names(ns.workloads):
        task, state, recorded, trials, wall = tune(name, ns)
        compared = report.compared_kernel(name, task, state, ns.out, compare)
        if compared is None:
            continue
        kernel, timed = compared
        run = {
            "name": name,
            "flop": task.compute_dag.flop_count,
            "trials": trials,
            "wall_s": wall,
            "record_us": recorded * 1e6,
            "tensorized": tensorized(kernel),
            "instructions": instructions(state, kernel),
            **({"batch": WORKLOADS[name][1][0]} if name in conv_names else {}),
            **timed,
            **where,
        }
        runs.append(run)
        for doc in documents(runs, conv_names):  # kept if the run is cut short
            write_results(doc, root=ns.out)
    for doc in documents(runs, conv_names):
        report.finish(doc, ns.publish)
    convs = [r for r in runs if r["name"] in conv_names]
    for (batch,), rows in report.runs_by(convs, "batch").items():
        print(summary_line(batch, rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
