"""Tests of measure.compiler: NVRTC and nvcc give generated kernels the same machine code (a
kernel runs as the search measured it, whichever back end compiled it), and the choice of back
end and its errors. The comparison needs both compilers and is skipped when either is missing.
"""

from __future__ import annotations

import os
import shutil
import struct
from concurrent.futures import ThreadPoolExecutor

import pytest

from autosched.codegen.cuda import codegen_program
from autosched.sketch import SketchSampler, generate_sketches
from autosched.task.search_task import suite_task
from measure import MeasureErrorKind, NvccNotFoundError, compile_kernel, find_compiler
from measure.nvrtc import NONCE_PREFIX, find_nvrtc
from tests.compilers import needs_nvcc

needs_nvrtc = pytest.mark.skipif(
    find_nvrtc() is None, reason="libnvrtc not found (pip install nvidia-cuda-nvrtc)"
)


def elf_sections(cubin: bytes) -> dict[str, tuple[int, bytes]]:
    """Section name -> (size, contents) of a 64-bit little-endian ELF file (a cubin); sections
    that hold no bytes in the file (.nv.shared.*) have empty contents."""
    assert cubin[:5] == b"\x7fELF\x02", "not a 64-bit ELF file"
    (table,) = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [
        struct.unpack_from("<IIQQQQIIQQ", cubin, table + i * entry_size) for i in range(count)
    ]
    names_offset = headers[names_index][4]
    sections = {}
    for name_at, kind, _, _, offset, size, *_ in headers:
        start = names_offset + name_at
        name = cubin[start : cubin.index(b"\0", start)].decode()
        sections[name] = (size, b"" if kind == 8 else cubin[offset : offset + size])  # 8: NOBITS
    return sections


def kernel_code(cubin: bytes) -> dict[str, tuple[int, bytes]]:
    """Each kernel's machine code (.text.*) and the sizes of its shared memory and parameter
    bank, without NVRTC's extra uniquely named kernel."""
    return {
        name: section
        for name, section in elf_sections(cubin).items()
        if name.startswith((".text.", ".nv.shared.", ".nv.constant0."))
        and NONCE_PREFIX not in name
        and not name.startswith(".nv.shared.reserved")
    }


HALF_KERNEL = """
#include <cuda_fp16.h>
extern "C" __global__ void __launch_bounds__(64) k(const half* __restrict__ a, half* b) {
  __shared__ half s[64];
  s[threadIdx.x] = hexp(a[threadIdx.x]) * __float2half(2.0f);
  __syncthreads();
  b[threadIdx.x] = __hmax(s[63 - threadIdx.x], a[threadIdx.x]);
}
"""


# The suite workloads whose sampled kernels are compiled both ways: one of each kind of kernel
# (a tiled GEMM, a tiled conv with fused epilogue, a cross-thread reduction, a depthwise conv).
COMPARED = ("matmul", "conv2d_bias_relu", "softmax", "depthwise")


def sampled_sources(seed: int = 6) -> list[tuple[str, str]]:
    """One sampled full-size kernel per compared suite workload, and a float16 kernel (it
    includes cuda_fp16.h, which NVRTC finds through the toolkit's headers): (name, source)."""
    sources = [("float16", HALF_KERNEL)]
    for name in COMPARED:
        sampler = SketchSampler(generate_sketches(suite_task(name).compute_dag))
        (state,) = sampler.sample(1, seed)
        sources.append((name, codegen_program(sampler.programs[state.key()])))
    return sources


@needs_nvcc
@needs_nvrtc
def test_nvrtc_and_nvcc_emit_the_same_machine_code():
    """Sampled kernels of four kinds (and a float16 one) get byte-identical SASS and the same
    ptxas report from both back ends."""
    jobs = sampled_sources()

    def both(job):
        name, source = job
        return name, [compile_kernel(source, "sm_90", compiler=c) for c in ("nvrtc", "nvcc")]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(both, jobs))
    for name, (by_nvrtc, by_nvcc) in results:
        assert by_nvrtc[0] == by_nvcc[0] == MeasureErrorKind.NO_ERROR, (name, by_nvcc[1])
        assert by_nvrtc[3] == by_nvcc[3], name  # registers, shared memory, spills, stack
        code_nvrtc, code_nvcc = kernel_code(by_nvrtc[2]), kernel_code(by_nvcc[2])
        assert any(s.startswith(".text.") for s in code_nvcc), name
        assert code_nvrtc == code_nvcc, name


def test_find_compiler_prefers_nvrtc_then_nvcc_then_says_neither(monkeypatch):
    nvrtc, nvcc = find_nvrtc(), shutil.which("nvcc")
    if nvrtc is not None:
        assert find_compiler() == ("nvrtc", nvrtc)
    monkeypatch.setenv("AUTOSCHED_NVRTC", "0")
    if nvcc is not None:
        assert find_compiler() == ("nvcc", nvcc)
    with pytest.raises(NvccNotFoundError, match="libnvrtc was not found"):
        find_compiler("nvrtc")
    with pytest.raises(ValueError, match="compiler must be one of"):
        find_compiler("clang")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(NvccNotFoundError, match="neither libnvrtc .* nor nvcc .* was found"):
        find_compiler()
    with pytest.raises(NvccNotFoundError, match="neither libnvrtc"):
        compile_kernel('extern "C" __global__ void k() {}', "sm_90")


@needs_nvcc
def test_compile_kernel_uses_nvcc_without_nvrtc(monkeypatch):
    monkeypatch.setenv("AUTOSCHED_NVRTC", "0")
    kind, _, cubin, kernels = compile_kernel(
        'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 1.0f; }', "sm_90"
    )
    assert kind == MeasureErrorKind.NO_ERROR and cubin is not None and list(kernels) == ["k"]
    kind, message, cubin, _ = compile_kernel('extern "C" __global__ void k() { oops; }', "sm_90")
    assert kind == MeasureErrorKind.COMPILE_ERROR and "oops" in message and cubin is None


@needs_nvrtc
def test_tuning_needs_nvrtc_or_nvcc_and_names_both_when_neither_is_there(monkeypatch):
    """`autosched tune` accepts NVRTC without nvcc (the builder needs no more); with neither
    it refuses in one line naming both."""
    from autosched.cli.gpu_tools import check_gpu_tools
    from autosched.errors import AutoschedError

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    try:
        check_gpu_tools()  # passes here only where a GPU is usable
    except AutoschedError as exc:
        assert "compiler" not in str(exc)  # NVRTC is enough: what is missing is the GPU
    monkeypatch.setenv("AUTOSCHED_NVRTC", "0")
    with pytest.raises(AutoschedError) as refused:
        check_gpu_tools()
    message = str(refused.value)
    assert "\n" not in message and "libnvrtc" in message and "nvcc" in message
