"""Tests of measure/kernel_split.py and of the builder compiling entry functions apart
(`LocalBuilder(split_entries=True)`): the same machine code as the whole source, one cache entry
per entry function, and the whole source compiled when a part does not compile alone."""

from __future__ import annotations

import pytest

from measure import ArgSpec, KernelArtifact, Launch, LocalBuilder, MeasureErrorKind, compile_kernel
from measure.kernel_split import ENTRY_PREFIX, split_entries
from measure.nvrtc import find_nvrtc
from tests.measure.test_measure_compiler import kernel_code

needs_nvrtc = pytest.mark.skipif(
    find_nvrtc() is None, reason="libnvrtc not found (pip install nvidia-cuda-nvrtc)"
)

SHARED = "__device__ __forceinline__ float twice(float x) { return 2.0f * x; }\n"
MAIN = """extern "C" __global__ void __launch_bounds__(128, 1) main_k(const float* a, float* b) {
  float acc = 0.0f;
  #pragma unroll
  for (int i = 0; i < 16; ++i) acc += a[threadIdx.x * 16 + i] * a[i];
  b[threadIdx.x] = twice(acc);
}
"""
EPILOGUE = """extern "C" __global__ void __launch_bounds__(%(n)d, 1) epi(const float* b, float* c) {
  c[blockIdx.x * %(n)d + threadIdx.x] = fmaxf(twice(b[blockIdx.x * %(n)d + threadIdx.x]), 0.0f);
}
"""
ARGS = (
    ArgSpec("a", (2048,), "float32"),
    ArgSpec("b", (128,), "float32"),
    ArgSpec("c", (128,), "float32", is_output=True),
)


def two_kernels(n: int) -> KernelArtifact:
    """The same main kernel with an epilogue of `n` threads a block."""
    source = SHARED + "\n" + MAIN + "\n" + EPILOGUE % {"n": n}
    launches = (
        Launch("main_k", (1, 1, 1), (128, 1, 1)),
        Launch("epi", (128 // n, 1, 1), (n, 1, 1)),
    )
    return KernelArtifact(source, launches, ARGS, "ref", "t")


def test_each_part_is_the_shared_text_and_one_entry():
    parts = split_entries(two_kernels(32).source)
    assert len(parts) == 2
    for part, name in zip(parts, ("main_k", "epi"), strict=True):
        assert part.startswith(SHARED)
        entries = [line for line in part.split("\n") if line.startswith(ENTRY_PREFIX)]
        assert len(entries) == 1 and f" {name}(" in entries[0]
    assert split_entries(SHARED + MAIN) == []  # one entry: nothing to split


@needs_nvrtc
def test_a_candidate_that_changes_one_kernel_compiles_only_that_one():
    """So a builder does by default: a search's split-K programs share their epilogues."""
    with LocalBuilder(n_parallel=1, compiler="nvrtc", arch="sm_90") as builder:
        first = builder.build([two_kernels(32)])[0]
        assert first.ok, first.error_msg
        assert list(first.entry_cubins) == ["epi"] and set(first.kernels) == {"main_k", "epi"}
        assert builder.kernel_cache.misses == 2
        second = builder.build([two_kernels(64)])[0]
        assert second.ok, second.error_msg
        assert builder.kernel_cache.misses == 3  # the main kernel came from the cache
    # the machine code of the whole source, entry by entry
    kind, message, whole, _ = compile_kernel(two_kernels(64).source, "sm_90", compiler="nvrtc")
    assert kind == MeasureErrorKind.NO_ERROR and whole is not None, message
    assert second.cubin is not None
    apart = kernel_code(second.cubin) | kernel_code(second.entry_cubins["epi"])
    assert apart == kernel_code(whole)


@needs_nvrtc
def test_a_part_that_does_not_compile_alone_sends_the_whole_source_to_the_compiler():
    art = two_kernels(32)
    # a helper between the entries: the epilogue's part lacks what the main kernel's holds
    source = SHARED + "\n" + MAIN + "\n" + "__device__ float three(float x) { return 3.0f * x; }\n"
    source += (EPILOGUE % {"n": 32}).replace("twice(", "three(")
    art = KernelArtifact(source, art.launches, art.args, "ref", "t")
    with LocalBuilder(n_parallel=1, compiler="nvrtc", arch="sm_90", split_entries=True) as builder:
        result = builder.build([art])[0]
    assert result.ok, result.error_msg
    assert result.entry_cubins == {} and set(result.kernels) == {"main_k", "epi"}


def test_a_part_past_the_timeout_ends_the_build_without_compiling_the_whole(monkeypatch):
    """The whole source holds that part and would run past the timeout too."""
    compiled = []

    def compile_cached(self, source):
        compiled.append(source)
        if " main_k(" in source:
            return MeasureErrorKind.COMPILE_TIMEOUT, "NVRTC ran past 3 s", None, {}
        return MeasureErrorKind.NO_ERROR, "", b"cubin", {}

    monkeypatch.setattr(LocalBuilder, "_compile_cached", compile_cached)
    with LocalBuilder(n_parallel=1, arch="sm_90") as builder:
        result = builder.build([two_kernels(32)])[0]
    assert result.error_kind == MeasureErrorKind.COMPILE_TIMEOUT
    assert result.error_msg == "NVRTC ran past 3 s"
    assert compiled == split_entries(two_kernels(32).source)[:1]


@needs_nvrtc
def test_a_kernel_past_the_timeout_is_compiled_once():
    with LocalBuilder(n_parallel=1, compiler="nvrtc", arch="sm_90", timeout=1e-3) as builder:
        result = builder.build([two_kernels(32)])[0]
        assert result.error_kind == MeasureErrorKind.COMPILE_TIMEOUT, result.error_msg
        assert builder.kernel_cache.misses == 1
