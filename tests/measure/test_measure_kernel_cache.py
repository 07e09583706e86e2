"""measure/kernel_cache.py, alone and in the builder: a source built again is not compiled again
(the compiler is faked and its calls counted, so no CUDA toolkit is needed)."""

from __future__ import annotations

import threading
import time

import pytest

from measure import ArgSpec, KernelArtifact, Launch, LocalBuilder, MeasureErrorKind
from measure import builder as builder_module
from measure.kernel_cache import KernelCache, cache_key, compiler_identity
from measure.ptxas import KernelResources

ARGS = (ArgSpec("a", (1024,), "float32"), ArgSpec("b", (1024,), "float32", is_output=True))
SOURCE = 'extern "C" __global__ void k(const float* a, float* b) { b[0] = a[0]; }'


def artifact(source: str) -> KernelArtifact:
    return KernelArtifact(source, (Launch("k", (4, 1, 1), (256, 1, 1)),), ARGS, "ref", "t")


class CountingCompiler:
    """Stands in for LocalBuilder._compile: a cubin per source (its bytes), calls counted;
    sources containing "broken" fail to compile."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, source: str):
        with self.lock:
            self.calls.append(source)
        if "broken" in source:
            return MeasureErrorKind.COMPILE_ERROR, "error: broken", None, {}
        return MeasureErrorKind.NO_ERROR, "", source.encode(), {"k": KernelResources(32)}


@pytest.fixture()
def compiler(monkeypatch) -> CountingCompiler:
    fake = CountingCompiler()
    monkeypatch.setattr(builder_module, "find_nvcc", lambda: "/no/such/nvcc")
    monkeypatch.setattr(LocalBuilder, "_compile", lambda builder, source: fake(source))
    return fake


def test_a_repeated_source_returns_the_same_cubin_without_compiling(compiler):
    builder = LocalBuilder(n_parallel=2, compiler="nvcc", arch="sm_90")
    first = builder.build([artifact(SOURCE), artifact(SOURCE + " ")])
    again = builder.build([artifact(SOURCE + " "), artifact(SOURCE)])
    assert all(r.ok for r in first + again)
    assert [r.cubin for r in again] == [first[1].cubin, first[0].cubin]
    assert again[1].kernels == first[0].kernels
    assert len(compiler.calls) == 2
    assert builder.kernel_cache.hits == 2


def test_one_source_twice_in_a_batch_is_compiled_once(compiler, monkeypatch):
    slow = compiler.__call__

    def compile_slowly(builder, source):
        time.sleep(0.05)  # the other build thread asks for the same source meanwhile
        return slow(source)

    monkeypatch.setattr(LocalBuilder, "_compile", compile_slowly)
    builder = LocalBuilder(n_parallel=4, compiler="nvcc", arch="sm_90")
    results = builder.build([artifact(SOURCE)] * 4)
    assert all(r.ok and r.cubin == SOURCE.encode() for r in results)
    assert len(compiler.calls) == 1


def test_a_failed_compilation_is_tried_again(compiler):
    builder = LocalBuilder(n_parallel=1, compiler="nvcc", arch="sm_90")
    for _ in range(2):
        (result,) = builder.build([artifact("broken " + SOURCE)])
        assert result.error_kind == MeasureErrorKind.COMPILE_ERROR
    assert len(compiler.calls) == 2


def test_a_folder_keeps_kernels_for_a_later_builder(compiler, tmp_path):
    LocalBuilder(n_parallel=1, compiler="nvcc", arch="sm_90", cache_dir=tmp_path).build(
        [artifact(SOURCE)]
    )
    later = LocalBuilder(n_parallel=1, compiler="nvcc", arch="sm_90", cache_dir=tmp_path)
    (result,) = later.build([artifact(SOURCE)])
    assert result.ok and result.cubin == SOURCE.encode()
    assert result.kernels == {"k": KernelResources(32)}
    assert len(compiler.calls) == 1
    other_arch = LocalBuilder(n_parallel=1, compiler="nvcc", arch="sm_80", cache_dir=tmp_path)
    other_arch.build([artifact(SOURCE)])
    assert len(compiler.calls) == 2


def test_the_key_covers_arch_flags_and_compiler():
    base = cache_key(SOURCE, "sm_90", "nvrtc:/lib/libnvrtc.so", ())
    assert base == cache_key(SOURCE, "sm_90", "nvrtc:/lib/libnvrtc.so", ())
    others = {
        cache_key(SOURCE + " ", "sm_90", "nvrtc:/lib/libnvrtc.so", ()),
        cache_key(SOURCE, "sm_80", "nvrtc:/lib/libnvrtc.so", ()),
        cache_key(SOURCE, "sm_90", "nvcc:/bin/nvcc", ()),
        cache_key(SOURCE, "sm_90", "nvrtc:/lib/libnvrtc.so", ("-lineinfo",)),
    }
    assert base not in others and len(others) == 4


def test_the_compiler_identity_changes_with_the_file(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_bytes(b"1")
    before = compiler_identity("nvcc", str(nvcc))
    nvcc.write_bytes(b"22")
    assert compiler_identity("nvcc", str(nvcc)) != before


def cubin(n: int):
    return MeasureErrorKind.NO_ERROR, "", bytes(n), {}


def test_memory_is_bounded_and_drops_the_least_recently_used():
    cache = KernelCache(memory_bytes=3 * (1000 + 256))
    for key in "abc":
        cache.put(key, cubin(1000))
    assert cache.get("a") is not None  # a is now the most recently used
    cache.put("d", cubin(1000))
    assert cache.get("b") is None
    assert all(cache.get(k) is not None for k in "acd")
    assert len(cache) == 3


def test_the_folder_is_bounded_and_a_damaged_file_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setattr("measure.kernel_cache.TRIM_EVERY", 1)
    cache = KernelCache(tmp_path, disk_bytes=2500)
    for key in "abcd":
        cache.put(key, cubin(1000))
    assert sum(f.stat().st_size for f in tmp_path.glob("*.kernel")) <= 2500
    assert (tmp_path / "d.kernel").exists()
    (tmp_path / "d.kernel").write_bytes(b"\x00garbage")
    assert KernelCache(tmp_path).get("d") is None
