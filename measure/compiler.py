"""Compile one CUDA source to a cubin: NVRTC when found, else nvcc, with the same code either way.

`compile_kernel` is what a kernel's user runs (and what `compile_resources` reports on); the
builder compiles through the same back ends (`compile_source`, `NvrtcCompiler`) with the same
options (measure/compile_options.py), so a kernel runs as it was measured. Each back end returns
(error kind, message, cubin or None, ptxas's resources per entry function).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import tempfile
import threading
from collections.abc import Sequence

from measure.compile_options import NVCC_OPTIONS, compile_arch, nvcc_arch_options
from measure.errors import MeasureErrorKind, NvccNotFoundError
from measure.nvrtc import ENV_VAR as NVRTC_ENV_VAR
from measure.nvrtc import NvrtcCompiler, find_nvrtc
from measure.ptxas import SOURCE_NAME, KernelResources, compile_failure, find_nvcc, parse_ptxas

COMPILERS = ("auto", "nvrtc", "nvcc")
CompileOutcome = tuple[MeasureErrorKind, str, bytes | None, dict[str, KernelResources]]
NO_COMPILER = (
    "neither libnvrtc (pip install nvidia-cuda-nvrtc, or the CUDA toolkit's; "
    f"${NVRTC_ENV_VAR} may name its path) nor nvcc (the CUDA toolkit's bin/ on PATH) was found"
)

# Idle NVRTC workers of `compile_kernel`, per (library, arch): started on first use, kept for
# the next call (a start costs an interpreter and a probe compile), one per concurrent caller.
_idle_workers: dict[tuple[str, str], queue.SimpleQueue[NvrtcCompiler]] = {}
_idle_lock = threading.Lock()


def find_compiler(compiler: str = "auto") -> tuple[str, str]:
    """("nvrtc", libnvrtc's path) or ("nvcc", nvcc's path) for `compiler` ("auto": NVRTC when
    found, else nvcc). Raises NvccNotFoundError when the one named, or for "auto" both, are
    missing."""
    if compiler not in COMPILERS:
        raise ValueError(f"compiler must be one of {COMPILERS}, got {compiler!r}")
    if compiler != "nvcc":
        path = find_nvrtc()
        if path is not None:
            return "nvrtc", path
        if compiler == "nvrtc":
            raise NvccNotFoundError(
                f"libnvrtc was not found (pip install nvidia-cuda-nvrtc, or set ${NVRTC_ENV_VAR} "
                "to its path)"
            )
    try:
        return "nvcc", find_nvcc()
    except NvccNotFoundError:
        if compiler == "nvcc":
            raise
        raise NvccNotFoundError(NO_COMPILER) from None


def compile_kernel(
    source: str,
    arch: str,
    extra_flags: Sequence[str] = (),
    timeout: float = 60.0,
    compiler: str = "auto",
) -> CompileOutcome:
    """Compile `source` for `arch` (e.g. "sm_90"): (error kind, message, cubin, resources).

    NVRTC (in a worker process kept for later calls) when `find_compiler(compiler)` finds it,
    else nvcc; "auto" also falls back to nvcc when an NVRTC worker cannot start. `extra_flags` go
    to the back end as given (NVRTC and nvcc spell options differently). Raises
    NvccNotFoundError when no compiler is there; a source that does not compile is a result.
    """
    arch = compile_arch(source, arch)
    name, path = find_compiler(compiler)
    if name == "nvrtc":
        try:
            return _compile_nvrtc(path, source, arch, extra_flags, timeout)
        except OSError as exc:
            if compiler == "nvrtc":
                raise NvccNotFoundError(str(exc)) from None
            try:
                path = find_nvcc()
            except NvccNotFoundError:
                raise NvccNotFoundError(f"{exc}; and nvcc was not found") from None
    return compile_source(source, arch, extra_flags, timeout, path)


def _compile_nvrtc(
    path: str, source: str, arch: str, extra_flags: Sequence[str], timeout: float
) -> CompileOutcome:
    with _idle_lock:
        idle = _idle_workers.setdefault((path, arch), queue.SimpleQueue())
    try:
        worker = idle.get_nowait()
    except queue.Empty:
        worker = NvrtcCompiler(path, arch)
    try:
        return worker.compile(source, extra_flags, timeout)
    finally:
        idle.put(worker)


def compile_source(
    source: str,
    arch: str,
    extra_flags: Sequence[str] = (),
    timeout: float = 30.0,
    nvcc: str | None = None,
) -> CompileOutcome:
    """nvcc's back end: `nvcc -cubin` on `source` in a temporary directory, with the options
    that make its code NVRTC's: (error kind, message, cubin, resources)."""
    nvcc = nvcc or find_nvcc()
    arch = compile_arch(source, arch)
    with tempfile.TemporaryDirectory(prefix="autosched_build_") as tmp:
        src = os.path.join(tmp, SOURCE_NAME)
        out = os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(source)
        cmd = [
            nvcc,
            "-cubin",
            *nvcc_arch_options(arch),
            *NVCC_OPTIONS,
            *extra_flags,
            "-o",
            out,
            src,
        ]
        # Own session so that a timeout kills nvcc's children (cicc, ptxas) too.
        proc = subprocess.Popen(
            cmd,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            text, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return MeasureErrorKind.COMPILE_TIMEOUT, f"nvcc ran past {timeout:g} s", None, {}
        log = text.decode(errors="replace")
        kernels = parse_ptxas(log)
        if proc.returncode != 0 or not os.path.exists(out):
            kind, message = compile_failure(log, SOURCE_NAME, f"nvcc exited with {proc.returncode}")
            return kind, message, None, kernels
        with open(out, "rb") as f:
            return MeasureErrorKind.NO_ERROR, "", f.read(), kernels


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.communicate()
