"""On the GPU: the hand-written schedules (a)-(f), built by `autosched.build`, run through
pycuda on the device and compared with numpy; and the conv2d kernels (a), (b) timed with CUDA
events beside PyTorch's conv2d.

Every test is marked `gpu`: tests/conftest.py skips them where pycuda sees no device, so this
file imports and skips cleanly on a machine without one. Run them with

    python -m pytest -q -n 0 -m gpu -s tests/gpu/test_gpu_kernels.py

(a) seed 000's AutoTVM conv2d template, full size (two configurations)
(b) seeds 001 / 002's conv2d + bias + relu schedules, full size
(c) the shared-memory tiled matmul with float4 cooperative fetching (test_lowering.py's builder),
    and the Ansor-style one of workloads_for_tests.py, double-buffered with cp.async too (and
    sampled Tensor Core states, implicit GEMM convolutions among them)
(d) fused elementwise ops
(e) softmax: the unscheduled and a scheduled multi-kernel state, and the cross-thread state of
    test_cross_thread.py (warp shuffles + shared memory)
(f) splits whose factors do not divide their extents
(g) memory-bound sketches: row sums a warp per row, RMSNorm of few long rows in two kernels,
    threads taking several vectors of an element-wise chain or of a pooling
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from autosched import build
from autosched.task.evaluate import evaluate
from autosched.te.dtype import from_storage, to_storage
from tests.workloads_for_tests import (
    AUTOTVM_CONV_CFG,
    AUTOTVM_SEED_BEST,
    SEED_001_TILES,
    SEED_001_VECTORS,
    SEED_002_TILES,
    SEED_002_VECTORS,
    autotvm_conv_state,
    conv2d_bias_relu_dag,
    conv2d_dag,
    fused_elementwise_dag,
    fused_elementwise_state,
    matmul_dag,
    matmul_shared_state,
    non_dividing_split_state,
    seed_conv_state,
    softmax_dag,
    softmax_multi_kernel_state,
)

pytestmark = pytest.mark.gpu

RESNET_LAST = (1, 7, 7, 512, 512, 3, 3, 1, 1)  # N, H, W, CO, CI, KH, KW, stride, padding


def run_on_gpu(dag, state, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-4):
    """Build `state`, run it on the GPU on seeded random inputs (outputs poisoned with NaN),
    compare every output with the naive evaluator (numpy); return the BuiltKernel."""
    kernel = build(dag, state)
    temps = {b.name for b in kernel.program.temps}
    rng = np.random.default_rng(seed)
    args = [a for a in kernel.args if a.name not in temps]
    arrays = [  # in their storage dtypes (bfloat16 as uint16 bits)
        to_storage(np.full(a.shape, np.nan), a.dtype)
        if a.is_output
        else to_storage(rng.uniform(-1, 1, a.shape), a.dtype)
        for a in args
    ]
    named = {a.name: x for a, x in zip(args, arrays, strict=True)}
    inputs = {t.name: named[t.name] for t in dag.tensors if not _is_output(kernel, t.name)}
    expected = evaluate(dag, inputs)
    kernel(*arrays)
    outputs = [a.name for a in kernel.args if a.is_output and a.name not in temps]
    assert outputs, "the kernel has no output argument"
    for name in outputs:
        dtype = next(a.dtype for a in args if a.name == name)
        got = from_storage(named[name], dtype)
        assert np.isfinite(got).all(), f"{name}: the GPU left NaNs (elements not written)"
        want = from_storage(expected[name], dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)
    return kernel


def tensor_core_instructions(source: str) -> bool:
    """Whether a kernel multiplies on the Tensor Cores: wmma's `mma_sync`, the PTX `mma.sync`
    of the mma flavour or Hopper's `wgmma.mma_async` (the search draws any of them)."""
    return any(op in source for op in ("mma_sync", "mma.sync", "wgmma.mma_async"))


def _is_output(kernel, name: str) -> bool:
    return any(a.name == name and a.is_output for a in kernel.args)


# ---- (a) the AutoTVM-style conv2d, (b) the seeds' conv2d + bias + relu ---------------------------


@pytest.fixture(scope="module")
def conv_dag():
    return conv2d_dag()


@pytest.fixture(scope="module")
def cbr_dag():
    return conv2d_bias_relu_dag()


@pytest.mark.parametrize("cfg", [AUTOTVM_CONV_CFG, AUTOTVM_SEED_BEST], ids=["chosen", "seed_best"])
def test_autotvm_conv2d_full_size(conv_dag, cfg):
    kernel = run_on_gpu(conv_dag, autotvm_conv_state(conv_dag, cfg), rtol=1e-4, atol=1e-3)
    assert len(kernel.launches) == 1


@pytest.mark.parametrize(
    "tiles,vectors", [(SEED_001_TILES, SEED_001_VECTORS), (SEED_002_TILES, SEED_002_VECTORS)],
    ids=["seed001", "seed002"],
)  # fmt: skip
def test_seed_conv2d_bias_relu_full_size(cbr_dag, tiles, vectors):
    kernel = run_on_gpu(cbr_dag, seed_conv_state(cbr_dag, tiles, vectors), rtol=1e-4, atol=1e-3)
    assert len(kernel.launches) == 1


# ---- (c) shared-memory tiled matmul --------------------------------------------------------------


def test_tiled_matmul_float4_cooperative_fetching():
    from tests.lower.test_lowering import tiled_matmul_state

    dag = matmul_dag(256, 192, 128)
    kernel = run_on_gpu(dag, tiled_matmul_state(dag))
    assert "float4" in kernel.source


def test_ansor_style_matmul_shared_state():
    dag = matmul_dag(512, 512, 256)
    run_on_gpu(dag, matmul_shared_state(dag))


def test_double_buffered_matmul_with_cp_async():
    dag = matmul_dag(512, 512, 256)
    state = matmul_shared_state(dag, vectors=(1, 4))
    kernel = run_on_gpu(dag, state.double_buffer("A.shared").double_buffer("B.shared"))
    assert "as_cp_async_16(" in kernel.source and "as_cp_async_4(" in kernel.source


@pytest.mark.parametrize("args", [(256, 384, 512), (200, 300, 168)], ids=["tiled", "padded"])
def test_double_buffered_tensor_core_matmul(args):
    """Sampled Tensor Core states, double-buffered, on multiples of 16 and on padded extents."""
    from autosched.sketch import SketchSampler, generate_sketches
    from autosched.sketch.utils import SketchParams
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag("matmul_fp16", args=args)
    sampler = SketchSampler(
        generate_sketches(dag), params=SketchParams(double_buffer_probability=1.0)
    )
    states = [s for s in sampler.sample(6, 0) if "tensorize" in str(s.steps)]
    assert states
    for state in states[:3]:
        kernel = run_on_gpu(dag, state, rtol=2e-2, atol=2e-2)
        assert tensor_core_instructions(kernel.source) and "as_cp_async_" in kernel.source


@pytest.mark.parametrize(
    "name, args",
    [
        ("conv2d_nchw_fp16", (32, 64, 8, 8, 64, 3, 3, 1, 1)),
        ("conv2d_nhwcnc_fp16", (32, 8, 8, 64, 64, 3, 3, 1)),
    ],
)
def test_tensor_core_convolutions_in_nchw_and_the_seeds_blocked_layout(name, args):
    from autosched.sketch import SketchSampler, generate_sketches
    from tests.sketch.test_tensor_core_sketch import tc_dag

    dag = tc_dag(name, args=args)
    states = SketchSampler(generate_sketches(dag)).sample(3, 0)
    assert states
    for state in states:
        kernel = run_on_gpu(dag, state, rtol=2e-2, atol=2e-2)
        assert tensor_core_instructions(kernel.source)


@pytest.mark.parametrize(
    "name, args",
    [
        ("conv2d_nhwc_fp16", (8, 14, 14, 64, 64, 3, 3, 1, 1)),  # batch 8: not tensorized before
        ("conv2d_nhwc_fp16", (1, 7, 7, 128, 128, 3, 3, 2, 1)),  # batch 1, stride 2: 16 pixels
        ("conv2d_nhwc_fp16", (2, 14, 14, 256, 64, 1, 1, 1, 0)),  # 1x1
        ("conv2d_nchw_fp16", (2, 64, 14, 14, 64, 3, 3, 1, 1)),
    ],
)
def test_implicit_gemm_convolutions(name, args):
    """Sampled implicit GEMM states (pixels fused as M, the gather in the tile fetch, the
    epilogue in the product's kernel), double-buffered or not."""
    from autosched.schedule.compute_dag import ComputeDAG
    from autosched.sketch import SketchSampler, generate_sketches
    from autosched.task.workload_registry import make_workload_key, workload_tensors

    dag = ComputeDAG(workload_tensors(make_workload_key(name, args)))
    sketches = [s for s in generate_sketches(dag) if any(".im2col" in x.name for x in s.stages)]
    states = SketchSampler(sketches).sample(3, 0)
    assert states
    for state in states:
        kernel = run_on_gpu(dag, state, rtol=2e-2, atol=2e-2)
        assert tensor_core_instructions(kernel.source)


# ---- (d) fused elementwise, (e) softmax, (f) non-dividing splits ---------------------------------


@pytest.mark.parametrize("shape,threads", [((64, 128, 200), 256), ((7, 13, 11), 96)])
def test_fused_elementwise(shape, threads):
    dag = fused_elementwise_dag(*shape)
    kernel = run_on_gpu(dag, fused_elementwise_state(dag, threads))
    assert len(kernel.launches) == 1


def test_softmax_unscheduled_multi_kernel():
    dag = softmax_dag(16, 50)
    kernel = run_on_gpu(dag, dag.get_init_state(), rtol=1e-5, atol=1e-6)
    assert len(kernel.launches) == 4  # max, exp, sum, divide


@pytest.mark.parametrize("n,m,threads", [(1024, 1000, 128), (37, 61, 32)])
def test_softmax_scheduled_multi_kernel(n, m, threads):
    dag = softmax_dag(n, m)
    kernel = run_on_gpu(dag, softmax_multi_kernel_state(dag, threads), rtol=1e-5, atol=1e-6)
    assert len(kernel.launches) == 4


@pytest.mark.parametrize("n,m,threads", [(1024, 1000, 128), (64, 100, 32), (8, 50, 64)])
def test_softmax_cross_thread(n, m, threads):
    cross = pytest.importorskip("tests.lower.test_cross_thread")
    if not hasattr(cross, "softmax_state"):
        pytest.skip("test_cross_thread.py has no softmax_state builder")
    dag = softmax_dag(n, m)
    kernel = run_on_gpu(dag, cross.softmax_state(dag, threads), rtol=1e-5, atol=1e-6)
    assert len(kernel.launches) == 1 and "__shfl" in kernel.source


@pytest.mark.parametrize(
    "shape,tiles",
    [((30, 20, 7), (4, 8, 3)), ((1000, 300, 77), (4, 8, 3)), ((129, 65, 33), (16, 16, 5))],
)
def test_non_dividing_splits(shape, tiles):
    dag = matmul_dag(*shape)
    kernel = run_on_gpu(dag, non_dividing_split_state(dag, *tiles))
    assert "if (" in kernel.source  # the guard


# ---- (g) memory-bound sketches: a warp per row, a cut sum's parts summed in its consumer ------


@pytest.mark.parametrize("shape", [(32768, 512), (4224, 48)])
def test_row_sums_a_warp_per_row(shape):
    """Sampled states of the warp-per-row sketches, one to four rows a warp
    (tests/sketch/test_cross_block.py)."""
    from autosched.sketch import SketchSampler, generate_sketches
    from tests.sketch.test_cross_block import on_warps, row_sums

    dag = row_sums(shape)
    sampler = SketchSampler([s for s in generate_sketches(dag) if on_warps(s)])
    for state in sampler.sample(6, 0):
        kernel = run_on_gpu(dag, state)
        assert "__shfl_xor_sync" in kernel.source and "__syncthreads" not in kernel.source


@pytest.mark.parametrize("which", ["bias_relu_mul", "max_pool"])
def test_threads_take_several_vectors_and_window_rows(which):
    """Sampled states of a large element-wise chain and a 2 x 2 max pooling whose threads take
    2 or 4 elements or vectors a block's width apart, the pooling's window rows read as
    float2 where drawn (sketch/thread_work.py; tests/sketch/test_thread_work.py)."""
    from autosched.sketch import SketchSampler, generate_sketches
    from tests.sketch.test_thread_work import bias_relu_mul, max_pool, repeats

    dag = bias_relu_mul(4096, 2048) if which == "bias_relu_mul" else max_pool(8, 64, 112, 112)
    sampler = SketchSampler(generate_sketches(dag))
    states = [s for s in sampler.sample(12, 0) if repeats(s) > 1][:4]
    assert states
    for state in states:
        run_on_gpu(dag, state)


def test_rms_norm_of_few_long_rows_sums_its_parts_where_it_reads_them():
    """Sampled states of RMSNorm 16 x 262144 (the memory-bound benchmark's row) whose cut sum
    of squares is summed inside the output's kernel: two kernels."""
    from autosched.sketch import SketchSampler, generate_sketches
    from tests.sketch.test_cross_block import parts_in_output, rms_norm

    dag = rms_norm(16, 1 << 18)
    sampler = SketchSampler([s for s in generate_sketches(dag) if parts_in_output(s)])
    for state in sampler.sample(3, 0):
        kernel = run_on_gpu(dag, state, rtol=1e-3, atol=1e-4)
        assert len(kernel.launches) == 2


def test_layer_norm_of_long_rows_reads_its_moments_in_one_pass():
    """Sampled block-per-row states of layer_norm(moments=True) at the memory-bound benchmark's
    128 x 65536: both moments summed in one pass over each row, then the row normalised."""
    from autosched.sketch import SketchSampler, generate_sketches
    from tests.sketch.test_layer_norm_moments import MOMENTS, layer_norm, one_pass

    dag = layer_norm(128, 65536, moments=True)
    rows = [s for s in generate_sketches(dag) if s[MOMENTS].attach is not None]
    assert rows and all(map(one_pass, rows))
    for state in SketchSampler(rows).sample(3, 0):
        kernel = run_on_gpu(dag, state, rtol=1e-3, atol=1e-3)
        assert len(kernel.launches) == 1


# ---- timings: (a) and (b) beside PyTorch's conv2d ------------------------------------------------


def _measure_with_runner(task, kernels: dict) -> dict:
    """Median seconds per run of each BuiltKernel by measure's runner (a worker process: the
    output checked against the task's numpy reference, then CUDA events around `number`
    back-to-back runs, `repeat` repeats), as a benchmark does."""
    from autosched.search.program_measurer import task_reference
    from measure import LocalBuilder, LocalMeasureContext, LocalRunner

    ref = task_reference(task, next(iter(kernels.values())).args)
    artifacts = [k.artifact(reference_id="ref", tag=name) for name, k in kernels.items()]
    runner = LocalRunner(number=100, repeat=20, min_repeat_ms=0)
    with LocalMeasureContext(LocalBuilder(), runner) as ctx:
        results = ctx.measure_batch(artifacts, {"ref": ref})
    out = {}
    for name, r in zip(kernels, results, strict=True):
        assert r.error_kind.name == "NO_ERROR" and r.costs, (name, r.error_kind, r.error_msg)
        out[name] = statistics.median(r.costs)
    return out


def test_conv2d_timings_beside_torch(capsys):
    """Times (a) and (b) at full size: measure's runner (events, median of 20 repeats of 100
    runs, output checked first); then, when torch with CUDA is importable, ours and PyTorch's
    conv2d in one process with one method (benchmarks.timing.compare_with_torch: events
    around back-to-back calls, inputs rotated past L2, median), ours checked against PyTorch."""
    from autosched.task.search_task import SearchTask

    rows = []
    conv_task = SearchTask("conv2d", RESNET_LAST)
    cbr_task = SearchTask("conv2d_bias_relu", RESNET_LAST)
    groups = {
        ("conv2d", conv_task): {
            "autotvm_chosen": autotvm_conv_state(conv_task.compute_dag, AUTOTVM_CONV_CFG),
            "autotvm_seed_best": autotvm_conv_state(conv_task.compute_dag, AUTOTVM_SEED_BEST),
        },
        ("conv2d_bias_relu", cbr_task): {
            "seed001": seed_conv_state(cbr_task.compute_dag, SEED_001_TILES, SEED_001_VECTORS),
            "seed002": seed_conv_state(cbr_task.compute_dag, SEED_002_TILES, SEED_002_VECTORS),
        },
    }
    torch_reason = None
    try:
        import torch

        if not torch.cuda.is_available():
            torch_reason = "torch sees no CUDA device"
    except ImportError as exc:
        torch_reason = f"torch is not importable ({exc})"
    for (workload, task), states in groups.items():
        kernels = {name: build(task.compute_dag, s) for name, s in states.items()}
        runner_s = _measure_with_runner(task, kernels)
        for name, kernel in kernels.items():
            row = {"workload": workload, "schedule": name, "runner_us": runner_s[name] * 1e6}
            if torch_reason is None:
                from benchmarks.timing import compare_with_torch

                row.update(compare_with_torch(workload, RESNET_LAST, kernel))
                assert row["matches_torch"], row
            rows.append(row)
    flop = conv_task.compute_dag.flop_count
    with capsys.disabled():
        print(f"\nconv2d 1x512x7x7 -> 512, 3x3, pad 1 ({flop / 1e6:.0f} MFLOP); median us")
        if torch_reason:
            print(f"  (PyTorch part skipped: {torch_reason})")
        for r in rows:
            line = f"  {r['workload']:17s} {r['schedule']:18s} runner {r['runner_us']:8.1f}"
            if "ours_us" in r:
                line += (
                    f" | same-process rotated: ours {r['ours_us']:8.1f}"
                    f"  torch fp32 {r['torch_fp32_us']:8.1f}  torch tf32 {r['torch_tf32_us']:8.1f}"
                    f" | L2-warm: ours {r['ours_warm_us']:8.1f}"
                    f"  torch fp32 {r['torch_fp32_warm_us']:8.1f}"
                )
            print(line)
    assert all(np.isfinite(r["runner_us"]) and r["runner_us"] > 0 for r in rows)
