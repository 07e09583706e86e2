"""Tests of measure's builder (nvcc or NVRTC + ptxas resource checks), artifacts, serialisation.

They need a compiler but no GPU: the builder's cases run once with nvcc and once with NVRTC
(libnvrtc: the `nvidia-cuda-nvrtc` wheel of the test extra, or the toolkit's); each is skipped
with a reason when its compiler is missing.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import msgpack
import numpy as np
import pytest

from measure import (
    ArgSpec,
    BuildResult,
    CompileError,
    HardwareParams,
    KernelArtifact,
    KernelResources,
    Launch,
    LocalBuilder,
    MeasureErrorKind,
    MeasureResult,
    NvccNotFoundError,
    check_resources,
    compile_resources,
    compile_source,
    pack,
    parse_ptxas,
    unpack,
)
from measure.builder import available_cores
from measure.nvrtc import NvrtcCompiler, find_nvrtc
from tests.compilers import NVCC_MISSING, needs_nvcc

NVRTC = find_nvrtc()
needs_nvrtc = pytest.mark.skipif(
    NVRTC is None, reason="libnvrtc not found (pip install nvidia-cuda-nvrtc)"
)
# the builder compiles with NVRTC where it is found; its nvcc twins run with -m slow
COMPILERS = [
    pytest.param("nvcc", marks=[needs_nvcc, pytest.mark.slow]),
    pytest.param("nvrtc", marks=needs_nvrtc),
]

ARGS = (ArgSpec("a", (1024,), "float32"), ArgSpec("b", (1024,), "float32", is_output=True))

SHARED_KERNEL = """
extern "C" __global__ void k(const float* __restrict__ a, float* __restrict__ b) {
  __shared__ float s[%(n)d];
  int t = threadIdx.x;
  s[t %% %(n)d] = a[t] * %(scale)d.0f;
  __syncthreads();
  b[t] = s[(%(n)d - 1 - t %% %(n)d)];
}
"""

SPILL_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(1024) k(const float* a, float* b) {
  float r[128];
#pragma unroll
  for (int i = 0; i < 128; i++) r[i] = a[i * blockDim.x + threadIdx.x];
  float s = 0;
#pragma unroll
  for (int j = 0; j < 4; j++)
#pragma unroll
    for (int i = 0; i < 128; i++) s = s * r[(i + j) % 128] + r[i];
  b[threadIdx.x] = s;
}
"""


def artifact(source: str, block=(256, 1, 1), name: str = "k", dynamic: int = 0) -> KernelArtifact:
    return KernelArtifact(source, (Launch(name, (4, 1, 1), block, dynamic),), ARGS, "ref", "t")


def shared_source(n: int, scale: int = 1) -> str:
    return SHARED_KERNEL % {"n": n, "scale": scale}


@pytest.fixture(scope="module", params=COMPILERS)
def special(request):
    """Build every special case in one parallel batch (the compiler is the slow part), with
    each compiler; the results carry the compiler's name under "compiler"."""
    cases = {
        "ok": artifact(shared_source(256)),
        "smem64k": artifact(shared_source(16384)),
        "threads2048": artifact(shared_source(256), block=(2048, 1, 1)),
        "syntax": artifact('extern "C" __global__ void k(float* a, float* b) { a[0] = oops; }'),
        "spill": artifact(SPILL_KERNEL, block=(1024, 1, 1)),
        "wrong_name": artifact(shared_source(256), name="not_there"),
    }
    with LocalBuilder(n_parallel=8, compiler=request.param) as builder:
        assert builder.compiler_used == request.param
        results = builder.build(list(cases.values()))
    return {"compiler": request.param, **dict(zip(cases, results, strict=True))}


@pytest.mark.parametrize("compiler", COMPILERS)
def test_parallel_batch_reports_registers_and_shared_memory(compiler):
    """A batch built by as many parallel compilations as sources: each result is its own
    source's (the shared memory tells them apart)."""
    sizes = [32 * (i + 1) for i in range(8)]
    arts = [artifact(shared_source(n, scale=i)) for i, n in enumerate(sizes)]
    with LocalBuilder(n_parallel=8, compiler=compiler) as builder:
        results = builder.build(arts)
    assert len(results) == 8
    for n, res in zip(sizes, results, strict=True):
        assert res.ok, res.error_msg
        assert res.cubin is not None and res.cubin[:4] == b"\x7fELF"
        k = res.kernels["k"]
        assert k.shared_bytes == 4 * n  # __shared__ float s[256] -> 1024 bytes
        assert 0 < k.registers <= 255
        assert k.spill_bytes == 0
        assert res.build_seconds > 0


def test_static_shared_over_48k_is_resource_limit(special):
    # ptxas itself refuses it ("uses too much shared data"): classified as a resource limit.
    res = special["smem64k"]
    assert res.error_kind == MeasureErrorKind.RESOURCE_LIMIT
    # nvcc's log says why; NVRTC's does not, and the builder's own check names the limit
    assert (
        "too much shared data" in res.error_msg or "65536 bytes of static shared" in res.error_msg
    )
    assert res.cubin is None


def test_2048_threads_per_block_is_resource_limit(special):
    res = special["threads2048"]
    assert res.error_kind == MeasureErrorKind.RESOURCE_LIMIT
    assert "2048 threads per block" in res.error_msg


def test_syntax_error_is_compile_error_with_message(special):
    res = special["syntax"]
    assert res.error_kind == MeasureErrorKind.COMPILE_ERROR
    assert "oops" in res.error_msg and "kernel.cu" in res.error_msg
    assert "/tmp" not in res.error_msg  # the temporary path is not leaked


def test_spills_are_rejected_unless_allowed(special):
    res = special["spill"]
    assert res.error_kind == MeasureErrorKind.RESOURCE_LIMIT
    assert "spills" in res.error_msg
    assert res.kernels["k"].spill_store_bytes > 0
    lenient = LocalBuilder(
        hardware=HardwareParams(max_local_memory_spill_bytes=1 << 20), compiler=special["compiler"]
    )
    assert lenient.build([artifact(SPILL_KERNEL, block=(1024, 1, 1))])[0].ok


def test_unknown_kernel_name_is_instantiation_error(special):
    res = special["wrong_name"]
    assert res.error_kind == MeasureErrorKind.INSTANTIATION_ERROR
    assert "not_there" in res.error_msg


@pytest.mark.parametrize("compiler", COMPILERS)
def test_compile_timeout_then_the_next_build_works(compiler):
    with LocalBuilder(timeout=0.005, compiler=compiler) as builder:
        res = builder.build([artifact(SPILL_KERNEL, block=(1024, 1, 1))])[0]
        assert res.error_kind == MeasureErrorKind.COMPILE_TIMEOUT
        assert "past 0.005 s" in res.error_msg
        builder.timeout = 30.0  # the killed NVRTC worker is replaced
        assert builder.build([artifact(shared_source(64))])[0].ok


@needs_nvcc
def test_timeout_stretches_when_compilations_oversubscribe_the_cpus():
    cpus = available_cores()
    assert LocalBuilder(n_parallel=cpus, timeout=4.0, compiler="nvcc").compile_timeout == 4.0
    assert LocalBuilder(n_parallel=4 * cpus, timeout=4.0, compiler="nvcc").compile_timeout == 16.0


@needs_nvcc
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_a_process_pinned_to_a_share_of_the_cores_compiles_on_that_share(monkeypatch):
    """One search a card of a 64-core, four-GPU machine runs on 16 cores: its builder starts 15
    compilations, not 63, and stretches the timeout by what it oversubscribes of its 16."""
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16, 32)))
    assert available_cores() == 16
    assert LocalBuilder(compiler="nvcc").n_parallel == 15
    assert (
        LocalBuilder(n_parallel=63, timeout=3.0, compiler="nvcc").compile_timeout == 3.0 * 63 / 16
    )


@needs_nvcc
@needs_nvrtc
def test_nvrtc_and_nvcc_report_the_same_resources():
    """NVRTC runs the same NVVM and ptxas as nvcc (with nvcc's 255-register limit, which NVRTC
    does not apply by default): registers within a few, the same shared memory and spills."""
    sources = [shared_source(256), SPILL_KERNEL]
    for source in sources:
        by_nvcc = compile_source(source, "sm_90")
        by_nvrtc = NvrtcCompiler(NVRTC, "sm_90")
        try:
            got = by_nvrtc.compile(source)
        finally:
            by_nvrtc.close()
        assert got[0] == by_nvcc[0] == MeasureErrorKind.NO_ERROR
        a, b = by_nvcc[3]["k"], got[3]["k"]
        assert abs(a.registers - b.registers) <= 8, (a, b)
        assert a.shared_bytes == b.shared_bytes and (a.spill_bytes > 0) == (b.spill_bytes > 0)


@needs_nvrtc
def test_nvrtc_reports_resources_for_a_repeated_source():
    """A program NVRTC has seen may come back from its cache without ptxas's report: the
    compiler makes each program unique and hides the extra kernel."""
    compiler = NvrtcCompiler(NVRTC, "sm_90")
    try:
        for _ in range(2):
            kind, _, cubin, kernels = compiler.compile(shared_source(128))
            assert kind == MeasureErrorKind.NO_ERROR and cubin is not None
            assert list(kernels) == ["k"] and kernels["k"].shared_bytes == 512
    finally:
        compiler.close()


@needs_nvrtc
def test_nvrtc_workers_start_in_the_background_and_stay_n_parallel():
    """start_workers() brings up n_parallel NVRTC workers (the constructor's first included)
    without blocking; builds then use them and never make more than n_parallel."""
    builder = LocalBuilder(n_parallel=3, compiler="nvrtc", arch="sm_90")
    try:
        builder.start_workers()
        builder.start_workers()  # a second call is a no-op
        builder._starting.join(timeout=60)
        assert len(builder._compilers) == 3
        assert all(c._proc is not None and c._proc.poll() is None for c in builder._compilers)
        results = builder.build([artifact(shared_source(64 * (i + 1))) for i in range(5)])
        assert [r.error_kind for r in results] == [MeasureErrorKind.NO_ERROR] * 5
        assert (
            len(builder._compilers) == 3 and sum(c.worker_starts for c in builder._compilers) == 3
        )
    finally:
        builder.close()
    assert all(c._proc is None for c in builder._compilers)


def test_nvrtc_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("AUTOSCHED_NVRTC", "0")
    assert find_nvrtc() is None
    with pytest.raises(NvccNotFoundError, match="libnvrtc was not found"):
        LocalBuilder(compiler="nvrtc")
    with pytest.raises(ValueError, match="compiler must be one of"):
        LocalBuilder(compiler="clang")
    monkeypatch.setenv("AUTOSCHED_NVRTC", "/no/such/libnvrtc.so")
    assert find_nvrtc() is None  # a path named explicitly is the only one tried


@needs_nvcc
def test_compile_resources():
    kernels = compile_resources(shared_source(256))
    assert kernels["k"].shared_bytes == 1024
    assert kernels["k"].spill_bytes == 0
    with pytest.raises(CompileError, match="oops"):
        compile_resources('extern "C" __global__ void k() { oops; }')


def test_missing_nvcc_raises_clear_error(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(NvccNotFoundError, match="nvcc was not found on PATH"):
        LocalBuilder(compiler="nvcc")


def test_malformed_artifact_is_instantiation_error_without_compiling():
    bad = KernelArtifact("", (), ARGS)
    try:
        builder = LocalBuilder()
    except NvccNotFoundError:
        pytest.skip(NVCC_MISSING)
    res = builder.build([bad])[0]
    assert res.error_kind == MeasureErrorKind.INSTANTIATION_ERROR


PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
    256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 256 bytes cumulative stack size
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]
"""


def test_parse_ptxas():
    kernels = parse_ptxas(PTXAS_LOG)
    assert kernels["k1"] == KernelResources(14, 1024, 0, 0, 0)
    assert kernels["k2"] == KernelResources(32, 0, 8, 12, 256)


@pytest.mark.parametrize(
    "res, launch, ok",
    [
        (KernelResources(64, 0), Launch("k", (1,), (1024,)), True),
        (KernelResources(65, 0), Launch("k", (1,), (1024,)), False),  # 72 x 1024 > 65536
        (KernelResources(32, 50000), Launch("k", (1,), (128,)), False),  # static > 48 KB
        (KernelResources(32, 40000), Launch("k", (1,), (128,), 10000), True),  # opt-in
        (KernelResources(32, 40000), Launch("k", (1,), (128,), 200 * 1024), False),
        (KernelResources(32, 1024), Launch("k", (1,), (128,), 200 * 1024), True),  # opt-in
        (KernelResources(32, 1024), Launch("k", (1,), (128,), 227 * 1024), False),
        (KernelResources(32, 0), Launch("k", (1,), (1, 1, 128)), False),  # z > 64
        (KernelResources(32, 0), Launch("k", (1, 70000), (32,)), False),  # grid y > 65535
    ],
)
def test_check_resources_limits(res, launch, ok):
    art = KernelArtifact("", (launch,), ARGS)
    kind, message = check_resources(art, {"k": res}, HardwareParams())
    assert (kind == MeasureErrorKind.NO_ERROR) == ok, message


def test_artifact_and_results_roundtrip_through_msgpack():
    art = KernelArtifact(
        "src",
        (Launch("k1", (4, 2), (32, 8), 0), Launch("k2", (1, 1, 1), (64,), 65536)),
        ARGS + (ArgSpec("c", (2, 3, 4), "float16", True),),
        reference_id="ref-1",
        tag="state 7",
        compile_cost=321.0,
    )
    back = KernelArtifact.from_dict(msgpack.unpackb(msgpack.packb(art.to_dict())))
    assert back == art
    assert back.launches[0].grid == (4, 2, 1)
    build = BuildResult(b"\x7fELF..", {"k1": KernelResources(10, 1024)}, build_seconds=1.5)
    assert BuildResult.from_dict(unpack(pack(build.to_dict()))) == build
    apart = dataclasses.replace(build, entry_cubins={"k2": b"\x7fELF.."})
    assert BuildResult.from_dict(unpack(pack(apart.to_dict()))) == apart
    hw = HardwareParams(num_sms=108, arch="sm_80")
    assert HardwareParams.from_dict(unpack(pack(hw.to_dict()))) == hw
    result = MeasureResult((1e-5, 2e-5), MeasureErrorKind.NO_ERROR, "", 1.0, 0.5, build.kernels)
    again = MeasureResult.from_dict(unpack(pack(result.to_dict())))
    assert again == result and again.mean_cost == pytest.approx(1.5e-5)
    failed = MeasureResult((), MeasureErrorKind.COMPILE_ERROR, "x", 1.0, 0.0, {})
    assert failed.mean_cost == float("inf")


def test_fast_comparison_agrees_with_the_float64_check():
    """compare_outputs' cached one-pass bound accepts what compare_output accepts, and every
    rejected output still gets compare_output's message."""
    from measure.reference import Reference, compare_output, compare_outputs

    rng = np.random.default_rng(3)
    ref = rng.standard_normal(10000).astype(np.float32)
    reference = Reference({}, {"y": ref}, 1e-3, 1e-4)
    bounds: dict = {}
    cases = {
        "exact": ref.copy(),
        "tiny": ref * np.float32(1 + 1e-5),
        "off": ref + np.float32(0.01),
        "nan": np.where(np.arange(ref.size) == 5, np.float32("nan"), ref).astype(np.float32),
    }
    for name, out in cases.items():
        slow = compare_output("y", out, ref, 1e-3, 1e-4)
        fast = compare_outputs({"y": out}, reference, bounds)
        assert fast == slow, name
    assert "y" in bounds and compare_outputs({"y": cases["off"]}, reference, bounds) is not None


REGISTER_HUNGRY_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(%(threads)d, 1)
k(const float* __restrict__ a, float* __restrict__ b) {
  float acc[300];
#pragma unroll
  for (int i = 0; i < 300; ++i) acc[i] = a[i * 1024 + threadIdx.x];
#pragma unroll
  for (int j = 0; j < 300; ++j) b[j * 1024 + threadIdx.x] = acc[299 - j] * acc[(j * 7) %% 300];
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_register_limit_per_block_size_is_ptxas_cap(compiler):
    """A kernel that wants more than 255 registers gets exactly what the block size allows: the
    register file over the warps rounded up to groups of 4, rounded down to 8 per thread (e.g.
    448 threads: 128, not 65536 / 448 = 146). The sampler's register budgets use this."""
    hw = HardwareParams()
    blocks = (256, 288, 448, 544, 800, 1024)
    arts = [artifact(REGISTER_HUNGRY_KERNEL % {"threads": t}, block=(t, 1, 1)) for t in blocks]
    with LocalBuilder(
        n_parallel=len(blocks),
        compiler=compiler,
        hardware=HardwareParams(max_local_memory_spill_bytes=1 << 20),
    ) as builder:
        results = builder.build(arts)
    got = {t: r.kernels["k"].registers for t, r in zip(blocks, results, strict=True)}
    want = {t: hw.registers_per_thread_limit(t) for t in blocks}
    assert want == {256: 255, 288: 168, 448: 128, 544: 96, 800: 72, 1024: 64}
    for t in blocks:  # ptxas may leave one register of the cap unused
        assert want[t] - 1 <= got[t] <= want[t], (t, got)


@needs_nvcc
def _compile_start_order(monkeypatch, arts):
    """The sources in the order two build threads started compiling them (compiles faked)."""
    import threading
    import time

    lock, started = threading.Lock(), []

    def fake_compile(self, source):
        with lock:
            started.append(source)
        time.sleep(0.02)  # a compile takes a while: the other thread gets the GIL meanwhile
        return MeasureErrorKind.COMPILE_ERROR, "not compiled", None, {}

    monkeypatch.setattr(LocalBuilder, "_compile", fake_compile)
    results = LocalBuilder(n_parallel=2, compiler="nvcc").build(arts)
    assert [r.error_kind for r in results] == [MeasureErrorKind.COMPILE_ERROR] * len(arts)
    assert sorted(started) == sorted(a.source for a in arts)
    return started


def _nearly_in_order(got, expected):
    """Two threads take the jobs in submission order; their records may swap neighbours."""
    return all(abs(expected.index(x) - k) <= 1 for k, x in enumerate(got))


def test_longest_sources_are_compiled_first(monkeypatch):
    """A long compilation started last holds up the end of the batch: without compile-cost
    estimates, the builder starts the longest sources first."""
    lengths = [30, 500, 70, 1000, 10, 200]
    arts = [artifact("k" + "x" * (n - 1)) for n in lengths]
    started = [len(s) for s in _compile_start_order(monkeypatch, arts)]
    assert _nearly_in_order(started, sorted(lengths, reverse=True)), started


def test_costliest_artifacts_are_compiled_first(monkeypatch):
    """An artifact's compile_cost (autosched: the statements nvcc emits) orders the builds before
    the source length does."""
    costs = [5.0, 0.0, 40.0, 10.0, 0.0, 20.0]
    arts = [
        dataclasses.replace(artifact(f"k{i}" + "x" * (10 * i)), compile_cost=c)
        for i, c in enumerate(costs)
    ]
    started = _compile_start_order(monkeypatch, arts)
    expected = [arts[i].source for i in (2, 5, 3, 0, 4, 1)]  # costs, then the longer of the 0s
    assert _nearly_in_order(started, expected), started
