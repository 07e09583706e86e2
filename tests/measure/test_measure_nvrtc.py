"""Tests of measure/nvrtc.py and its worker's speed options (compile_options.NVRTC_SPEED_OPTIONS):
a worker uses only the options its library accepts, half-precision kernels reuse the worker's
precompiled headers and get the same machine code as without them, and the folder of those
headers goes with the worker. The NVRTC cases are skipped without libnvrtc.
"""

from __future__ import annotations

import os

import pytest

from measure import MeasureErrorKind
from measure._nvrtc_worker import PROBE, accepted_speed_options
from measure.compile_options import NVRTC_OPTIONS, NVRTC_SPEED_OPTIONS
from measure.nvrtc import NvrtcCompiler, NvrtcLibrary, find_cuda_include, find_nvrtc
from tests.measure.test_measure_compiler import HALF_KERNEL, kernel_code

NVRTC = find_nvrtc()
needs_nvrtc = pytest.mark.skipif(
    NVRTC is None, reason="libnvrtc not found (pip install nvidia-cuda-nvrtc)"
)


class OldLibrary:
    """An NVRTC that fails every compilation given an option it does not know (as libnvrtc
    answers NVRTC_ERROR_INVALID_OPTION)."""

    def __init__(self, unknown: set[str]) -> None:
        self.unknown = unknown
        self.calls: list[list[str]] = []

    def compile(self, source: str, options: list[str]) -> tuple[int, str, bytes | None]:
        self.calls.append(options)
        assert source == PROBE
        known = not any(option.split("=")[0] in self.unknown for option in options)
        return (0, "", b"cubin") if known else (5, "unknown option", None)


def test_a_worker_uses_only_the_speed_options_its_library_accepts():
    everything = accepted_speed_options(OldLibrary(set()), "sm_90", "/tmp/x")
    assert list(everything) == list(NVRTC_SPEED_OPTIONS)
    assert "--pch-dir=/tmp/x" in everything["pch"]
    no_cache_unknown = OldLibrary({"--no-cache"})
    assert list(accepted_speed_options(no_cache_unknown, "sm_90", "/tmp/x")) == ["pch", "minimal"]
    assert all(call[0] == "--gpu-architecture=sm_90" for call in no_cache_unknown.calls)
    # without a folder, no precompiled headers (and no "{pch_dir}" left in an option)
    assert list(accepted_speed_options(OldLibrary(set()), "sm_90", None)) == ["no-cache", "minimal"]


@needs_nvrtc
def test_half_kernels_reuse_precompiled_headers_with_the_same_machine_code():
    """The second compilation of a cuda_fp16.h kernel loads the worker's precompiled header;
    both give the machine code of a compilation without any speed option."""
    assert NVRTC is not None
    include = find_cuda_include()
    plain_options = ["--gpu-architecture=sm_90", *NVRTC_OPTIONS]
    plain_options += [f"--include-path={include}"] if include else []
    result, log, plain = NvrtcLibrary(NVRTC).compile(HALF_KERNEL, plain_options)
    assert result == 0 and plain is not None, log
    compiler = NvrtcCompiler(NVRTC, "sm_90")
    try:
        compiler.start()
        if "pch" not in compiler.speed_options:
            pytest.skip("this libnvrtc has no precompiled headers (NVRTC 12.8+)")
        folder = compiler.pch_dir
        assert folder is not None
        for _ in range(2):
            kind, message, cubin, kernels = compiler.compile(HALF_KERNEL)
            assert kind == MeasureErrorKind.NO_ERROR and cubin is not None, message
            assert kernel_code(cubin) == kernel_code(plain)
            assert list(kernels) == ["k"]
        assert any(name.endswith(".pch") for name in os.listdir(folder))
    finally:
        compiler.close()
    assert not os.path.exists(folder)  # NVRTC leaves it when its process is killed


@needs_nvrtc
def test_a_killed_worker_takes_its_header_folder_and_the_next_one_makes_another():
    assert NVRTC is not None
    compiler = NvrtcCompiler(NVRTC, "sm_90")
    try:
        compiler.start()
        first = compiler.pch_dir
        assert first is not None and os.path.isdir(first)
        kind, *_ = compiler.compile(HALF_KERNEL, timeout=1e-4)  # killed past its timeout
        assert kind == MeasureErrorKind.COMPILE_TIMEOUT
        assert compiler.pch_dir is None and not os.path.exists(first)
        kind, *_ = compiler.compile(HALF_KERNEL)
        assert kind == MeasureErrorKind.NO_ERROR
        assert compiler.pch_dir not in (None, first) and os.path.isdir(compiler.pch_dir)
    finally:
        compiler.close()


@needs_nvrtc
def test_without_a_temporary_folder_the_worker_compiles_without_precompiled_headers(monkeypatch):
    assert NVRTC is not None

    def no_folder(*args, **kwargs):
        raise OSError("read-only file system")

    monkeypatch.setattr("measure.nvrtc.tempfile.mkdtemp", no_folder)
    compiler = NvrtcCompiler(NVRTC, "sm_90")
    try:
        kind, message, cubin, _ = compiler.compile(HALF_KERNEL)
        assert kind == MeasureErrorKind.NO_ERROR and cubin is not None, message
        assert compiler.pch_dir is None and "pch" not in compiler.speed_options
    finally:
        compiler.close()
