"""Compile kernel artifacts to cubins (NVRTC or nvcc), in parallel, and check their resources."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence

from measure.artifact import KernelArtifact
from measure.compile_options import compile_arch
from measure.compiler import COMPILERS, CompileOutcome, compile_kernel, compile_source
from measure.errors import CompileError, MeasureErrorKind, NvccNotFoundError
from measure.hardware import HardwareParams, device_arch
from measure.kernel_cache import KernelCache, cache_key, compiler_identity
from measure.kernel_split import split_entries
from measure.nvrtc import ENV_VAR as NVRTC_ENV_VAR
from measure.nvrtc import NvrtcCompiler, find_nvrtc
from measure.ptxas import KernelResources, find_nvcc


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """Outcome of building one artifact: the cubin and per-kernel resources, or an error."""

    cubin: bytes | None
    kernels: dict[str, KernelResources]
    error_kind: MeasureErrorKind = MeasureErrorKind.NO_ERROR
    error_msg: str = ""
    build_seconds: float = 0.0
    finished_at: float = 0.0  # time.perf_counter() when the build ended (this process's clock)
    # entry functions compiled apart (`LocalBuilder(split_entries=True)`) that `cubin` does not
    # hold: entry name -> the cubin that does; empty when `cubin` holds every entry
    entry_cubins: dict[str, bytes] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the cubin can be run."""
        return self.error_kind == MeasureErrorKind.NO_ERROR

    def to_dict(self) -> dict:
        """Plain-dict form."""
        return {
            "cubin": self.cubin,
            "kernels": {k: v.to_dict() for k, v in self.kernels.items()},
            "error_kind": int(self.error_kind),
            "error_msg": self.error_msg,
            "build_seconds": self.build_seconds,
            "entry_cubins": self.entry_cubins,
        }

    @classmethod
    def from_dict(cls, data: dict) -> BuildResult:
        """Inverse of `to_dict`."""
        return cls(
            data["cubin"],
            {k: KernelResources.from_dict(v) for k, v in data["kernels"].items()},
            MeasureErrorKind(data["error_kind"]),
            data["error_msg"],
            data["build_seconds"],
            entry_cubins=dict(data.get("entry_cubins") or {}),
        )


def available_cores() -> int:
    """CPU cores this process may run on: its affinity (taskset, a cgroup cpuset, one search a
    card of `benchmarks/run_queue.py`) where the OS tells it, else every core. Counting every
    core of a machine while pinned to a share of it would start that many compilations on the
    share and leave the timeout unstretched: kernels would time out for the crowd, not for their
    own cost."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class LocalBuilder:
    """Builds artifacts to cubins, `n_parallel` compilations at a time (default: one fewer than
    the CPU count), and checks ptxas's resource report against the hardware.

    `compiler`: "nvrtc" (libnvrtc in worker processes, see measure/nvrtc.py: no host-header
    preprocessing, several times faster per kernel), "nvcc" (`nvcc -cubin`), or "auto" (default):
    NVRTC when `find_nvrtc()` finds the library, else nvcc. Both run the same NVVM and ptxas, with
    options that make them emit the same code (measure/compile_options.py), which is also what
    `compile_kernel` runs for a kernel's user. `compiler_used` says which one builds. A
    compilation past `timeout` seconds (default 3; with NVRTC, of the compiler's own CPU time
    where the OS tells it, see measure/nvrtc.py) is a COMPILE_TIMEOUT: one huge unrolled kernel
    must not hold up a whole batch (a batch of 64 takes at least as long as its slowest build);
    the fastest kernels that searches find compile well within it.

    Compiled kernels are kept (`kernel_cache`, measure/kernel_cache.py), keyed by source, arch,
    options and compiler: a source met again is not compiled again. In memory by default;
    `cache_dir` (e.g. `kernel_cache.DEFAULT_FOLDER`) keeps them on disk as well, for later
    processes. `split_entries` (default) compiles each entry function of a source of several
    apart (measure/kernel_split.py), each its own cache entry: a candidate that changes only one
    kernel of a program compiles only that one (a split-K program's cheap epilogue, met again by
    many candidates, is compiled once). The machine code is the same; the result then holds one
    cubin per entry (`BuildResult.entry_cubins`). A program of small kernels that all change
    pays one compiler call per entry instead of one in all.

    The architecture is `arch` when given, else that of the GPU pycuda sees (if any), else
    `hardware.arch`. Raises NvccNotFoundError at construction when neither compiler is found
    (or the one named is missing). Call `close()` (or use `with`) to stop NVRTC workers early;
    they are daemons and end with the process anyway.
    """

    def __init__(
        self,
        n_parallel: int | None = None,
        timeout: float = 3.0,
        arch: str | None = None,
        hardware: HardwareParams | None = None,
        extra_flags: Sequence[str] = (),
        compiler: str = "auto",
        cache_dir: str | os.PathLike[str] | None = None,
        split_entries: bool = True,
    ) -> None:
        if compiler not in COMPILERS:
            raise ValueError(f"compiler must be one of {COMPILERS}, got {compiler!r}")
        self._idle_compilers: queue.SimpleQueue[NvrtcCompiler] = queue.SimpleQueue()
        self._compilers: list[NvrtcCompiler] = []
        self._compilers_lock = threading.Lock()
        self._starting: threading.Thread | None = None
        # One core is left to the runner's launch loop and the search when none is named.
        self.n_parallel = max(1, n_parallel or available_cores() - 1)
        self.timeout = timeout
        self.hardware = hardware or HardwareParams()
        self.arch = arch or device_arch() or self.hardware.arch
        self.extra_flags = tuple(extra_flags)
        self.split_entries = split_entries
        self.compiler_used = self._choose_compiler(compiler)
        self.nvcc = find_nvcc() if self.compiler_used == "nvcc" else None
        self.kernel_cache = KernelCache(cache_dir)
        path = self.nvcc if self.nvcc is not None else self._compilers[0].path
        self._compiler_identity = compiler_identity(self.compiler_used, path)

    def _choose_compiler(self, compiler: str) -> str:
        """NVRTC when asked or found and its first worker starts (it compiles a probe kernel);
        else nvcc."""
        path = find_nvrtc() if compiler in ("auto", "nvrtc") else None
        problem = "libnvrtc was not found"
        if path is not None:
            first = NvrtcCompiler(path, self.arch)
            try:
                first.start()
            except OSError as exc:
                problem = str(exc)
            else:
                self._compilers.append(first)
                self._idle_compilers.put(first)
                return "nvrtc"
        if compiler == "nvrtc":
            raise NvccNotFoundError(
                f"{problem} (set ${NVRTC_ENV_VAR} to libnvrtc's path, or use compiler='nvcc')"
            )
        return "nvcc"

    def build(self, artifacts: Sequence[KernelArtifact]) -> list[BuildResult]:
        """Compile every artifact; results in the same order. Never raises for a candidate."""
        done = dict(self.build_as_completed(artifacts))
        return [done[i] for i in range(len(artifacts))]

    def build_as_completed(
        self, artifacts: Sequence[KernelArtifact]
    ) -> Iterator[tuple[int, BuildResult]]:
        """Compile every artifact, `n_parallel` at a time, yielding (index, result) as each one
        finishes, so that a caller can run the first kernels while the others still compile.
        The costliest artifacts (`compile_cost`, then source length) start first: a long
        compilation started last would hold up the end of the batch."""
        if len(artifacts) <= 1 or self.n_parallel == 1:
            for i, a in enumerate(artifacts):
                yield i, self.build_one(a)
            return
        workers = min(self.n_parallel, len(artifacts))
        costliest_first = sorted(
            range(len(artifacts)),
            key=lambda i: (-artifacts[i].compile_cost, -len(artifacts[i].source)),
        )
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(self.build_one, artifacts[i]): i for i in costliest_first}
            for done in concurrent.futures.as_completed(futures):
                yield futures[done], done.result()

    def build_one(self, artifact: KernelArtifact) -> BuildResult:
        """Compile and check one artifact."""
        start = time.perf_counter()
        try:
            result = self._build(artifact)
        except Exception as exc:  # a bug or an OS error: a result, never a lost batch
            result = BuildResult(None, {}, MeasureErrorKind.UNKNOWN, f"{type(exc).__name__}: {exc}")
        end = time.perf_counter()
        return dataclasses.replace(result, build_seconds=end - start, finished_at=end)

    def _build(self, artifact: KernelArtifact) -> BuildResult:
        problem = artifact.validate()
        if problem:
            return BuildResult(None, {}, MeasureErrorKind.INSTANTIATION_ERROR, problem)
        apart = self._compile_apart(artifact.source) if self.split_entries else None
        if isinstance(apart, BuildResult):  # a part ran past the timeout
            return apart
        if apart is not None:
            first, entry_cubins, every_kernel = apart
            kind, message = check_resources(artifact, every_kernel, self.hardware)
            if kind != MeasureErrorKind.NO_ERROR:
                return BuildResult(None, every_kernel, kind, message)
            return BuildResult(first, every_kernel, entry_cubins=entry_cubins)
        kind, message, cubin, kernels = self._compile_cached(artifact.source)
        if kind == MeasureErrorKind.COMPILE_ERROR and kernels:
            # ptxas reported the kernel and then failed: NVRTC's log names no reason when a
            # resource is over its limit (nvcc's says "too much shared data"), so check them
            over, why = check_resources(artifact, kernels, self.hardware)
            if over == MeasureErrorKind.RESOURCE_LIMIT:
                kind, message = over, why
        if kind != MeasureErrorKind.NO_ERROR:
            return BuildResult(None, kernels, kind, message)
        kind, message = check_resources(artifact, kernels, self.hardware)
        if kind != MeasureErrorKind.NO_ERROR:
            return BuildResult(None, kernels, kind, message)
        return BuildResult(cubin, kernels)

    @property
    def compile_timeout(self) -> float:
        """`timeout` stretched by how far `n_parallel` oversubscribes the cores this process may
        use: the limit is on a kernel's own compile cost, and 16 compilations on 2 cores each
        take ~8x longer."""
        return self.timeout * max(1.0, self.n_parallel / available_cores())

    def start_workers(self) -> None:
        """Start the NVRTC workers a full batch needs (`n_parallel`) in the background, now:
        otherwise each build thread starts its own at its first compilation, and the first batch
        waits for them (interpreter, libnvrtc, a probe compile: ~1 s each when 15 start at once
        on the H100 machine). Returns at once; a no-op with nvcc or when already started."""
        if self.compiler_used != "nvrtc" or self._starting is not None:
            return

        def start_one(_) -> None:
            compiler = self._new_compiler()
            if compiler is None:
                return
            try:
                compiler.start()
            except OSError:  # compile() retries, and reports the failure per candidate
                pass
            self._idle_compilers.put(compiler)

        def start_all() -> None:
            missing = self.n_parallel - len(self._compilers)
            if missing > 0:
                with concurrent.futures.ThreadPoolExecutor(max_workers=missing) as pool:
                    list(pool.map(start_one, range(missing)))

        self._starting = threading.Thread(target=start_all, name="nvrtc-workers", daemon=True)
        self._starting.start()

    def _new_compiler(self) -> NvrtcCompiler | None:
        """A new (not started) NVRTC compiler, or None when `n_parallel` exist already."""
        with self._compilers_lock:
            if len(self._compilers) >= self.n_parallel:
                return None
            compiler = NvrtcCompiler(self._compilers[0].path, self.arch)
            self._compilers.append(compiler)
            return compiler

    def _compile_cached(self, source: str) -> CompileOutcome:
        """`_compile`'s outcome, from `kernel_cache` when this source was compiled before (or is
        being compiled by another build thread)."""
        key = cache_key(source, self.arch, self._compiler_identity, self.extra_flags)
        return self.kernel_cache.get_or_compile(key, lambda: self._compile(source))

    def _compile_apart(
        self, source: str
    ) -> tuple[bytes, dict[str, bytes], dict[str, KernelResources]] | BuildResult | None:
        """(the first entry's cubin, the other entries' cubins by name, every entry's resources)
        with each entry function compiled apart (and cached), or None when the source does not
        split or a part does not compile: then the whole source is compiled, and reports its
        errors as it would unsplit. A part that runs past the timeout ends the build (the
        failed BuildResult): the whole source holds that part and would run past it too, so
        compiling it as well would only spend a second timeout on the same kernel."""
        parts = split_entries(source)
        if not parts:
            return None
        first: bytes | None = None
        entry_cubins: dict[str, bytes] = {}
        kernels: dict[str, KernelResources] = {}
        for part in parts:
            kind, message, cubin, part_kernels = self._compile_cached(part)
            if kind == MeasureErrorKind.COMPILE_TIMEOUT:
                return BuildResult(None, part_kernels, kind, message)
            if kind != MeasureErrorKind.NO_ERROR or cubin is None:
                return None
            if first is None:
                first = cubin
            else:
                entry_cubins.update(dict.fromkeys(part_kernels, cubin))
            kernels.update(part_kernels)
        assert first is not None  # split_entries gives two parts or more
        return first, entry_cubins, kernels

    def _compile(self, source: str) -> CompileOutcome:
        if compile_arch(source, self.arch) != self.arch:  # sm_90a: not this builder's workers
            return compile_kernel(
                source, self.arch, self.extra_flags, self.compile_timeout, self.compiler_used
            )
        if self.compiler_used == "nvcc":
            return compile_source(
                source, self.arch, self.extra_flags, self.compile_timeout, self.nvcc
            )
        try:
            compiler = self._idle_compilers.get_nowait()
        except queue.Empty:
            # at most n_parallel are ever made; when all exist, one is starting in the background
            compiler = self._new_compiler() or self._idle_compilers.get()
        try:
            return compiler.compile(source, self.extra_flags, self.compile_timeout)
        finally:
            self._idle_compilers.put(compiler)

    def close(self) -> None:
        """Stop the NVRTC worker processes (they restart if the builder is used again)."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        for compiler in self._compilers:
            compiler.close()

    def __enter__(self) -> LocalBuilder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_resources(
    artifact: KernelArtifact, kernels: dict[str, KernelResources], hw: HardwareParams
) -> tuple[MeasureErrorKind, str]:
    """Check every launch against the hardware limits; (NO_ERROR, "") when it can launch."""
    limit = MeasureErrorKind.RESOURCE_LIMIT
    for launch in artifact.launches:
        name = launch.kernel_name
        res = kernels.get(name)
        if res is None:
            known = ", ".join(sorted(kernels)) or "none"
            return (
                MeasureErrorKind.INSTANTIATION_ERROR,
                f"launch names kernel {name!r}, not an entry function of the source "
                f'(entries: {known}); kernels must be extern "C" __global__',
            )
        threads = launch.threads_per_block
        if threads > hw.max_threads_per_block:
            return limit, f"{name}: {threads} threads per block > {hw.max_threads_per_block}"
        for axis, (dim, most) in enumerate(zip(launch.block, hw.max_block_dims, strict=True)):
            if dim > most:
                return limit, f"{name}: block dimension {'xyz'[axis]} = {dim} > {most}"
        for axis, (dim, most) in enumerate(zip(launch.grid, hw.max_grid_dims, strict=True)):
            if dim > most:
                return limit, f"{name}: grid dimension {'xyz'[axis]} = {dim} > {most}"
        dynamic = launch.dynamic_shared_bytes
        total = res.shared_bytes + dynamic
        if res.shared_bytes > hw.max_shared_memory_per_block:
            return limit, (
                f"{name}: {res.shared_bytes} bytes of static shared memory > "
                f"{hw.max_shared_memory_per_block} (larger buffers must be dynamic)"
            )
        most = hw.max_shared_memory_per_block_optin if dynamic else hw.max_shared_memory_per_block
        if total > most:
            return limit, (
                f"{name}: {res.shared_bytes} static + {dynamic} dynamic shared bytes > {most}"
            )
        if res.registers > hw.max_registers_per_thread:
            return (
                limit,
                f"{name}: {res.registers} registers per thread > {hw.max_registers_per_thread}",
            )
        needed = hw.registers_needed(res.registers, threads)
        if needed > hw.max_registers_per_block:
            return limit, (
                f"{name}: {res.registers} registers x {threads} threads needs {needed} registers "
                f"> {hw.max_registers_per_block} per block"
            )
        if res.spill_bytes > hw.max_local_memory_spill_bytes:
            return limit, (
                f"{name}: spills {res.spill_store_bytes} bytes stored + {res.spill_load_bytes} "
                f"loaded > {hw.max_local_memory_spill_bytes} allowed"
            )
    return MeasureErrorKind.NO_ERROR, ""


def compile_resources(
    source: str, arch: str = "sm_90", extra_flags: Sequence[str] = (), timeout: float = 60.0
) -> dict[str, KernelResources]:
    """Compile `source` as `compile_kernel` does (NVRTC when found, else nvcc; the same code)
    and return ptxas's resources per entry function.

    Raises CompileError (with the compiler's relevant lines) when it does not compile,
    NvccNotFoundError when no compiler is found. Used e.g. to assert that generated code spills
    0 bytes.
    """
    kind, message, _, kernels = compile_kernel(source, arch, extra_flags, timeout)
    if kind != MeasureErrorKind.NO_ERROR:
        raise CompileError(f"{kind.name}: {message}")
    return kernels
