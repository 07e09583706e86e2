"""NVRTC: compile CUDA source to a cubin through libnvrtc, in long-lived worker processes.

Why: `nvcc -cubin` preprocesses and parses the whole CUDA runtime header set for every kernel
(gcc -E + cicc's front end: most of a typical generated kernel's build time), and spawns three
processes. NVRTC has the device builtins inside, so only the kernel itself is compiled; ptxas
still runs (in-process), and `--ptxas-options=--verbose` gives the same resource report that
`parse_ptxas` reads.

Each `NvrtcCompiler` owns one worker process (`python -m measure._nvrtc_worker`, like the
runner's) that loads libnvrtc once, and a folder for the worker's precompiled headers (removed
with the worker: NVRTC removes its files only when its process ends normally); a compilation
that runs past its timeout kills the worker, and the next compilation starts a fresh one. The
timeout is on the worker's CPU time, where the OS tells it (Linux): a kernel's own compile cost,
not the wall time that the search's processes and the other compilers sharing the cores stretch
it to (up to `WALL_LIMIT_FACTOR` times the timeout).
`find_nvrtc()` locates the library: `$AUTOSCHED_NVRTC` (a path, or `0`/`off` to disable
NVRTC), the CUDA toolkit next to nvcc, `$CUDA_HOME`, the NVIDIA pip wheels on `sys.path`, then
the loader's search path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence

from measure.compile_options import NVRTC_OPTIONS
from measure.errors import MeasureErrorKind
from measure.framing import (
    FrameEOF,
    FrameTimeout,
    ReadyWorker,
    WorkerStartError,
    start_ready_worker,
    write_frame,
)
from measure.ptxas import SOURCE_NAME, KernelResources, compile_failure, find_nvcc, parse_ptxas

ENV_VAR = "AUTOSCHED_NVRTC"
START_TIMEOUT = 60.0
# a compilation slowed by other work on the cores gets at most this many times its timeout in
# wall time
WALL_LIMIT_FACTOR = 4.0
_BUILD_COUNTER = itertools.count()
NONCE_PREFIX = "autosched_nonce_"


def process_cpu_seconds(pid: int) -> float | None:
    """The CPU seconds (user + system) process `pid` has run, from /proc; None where the OS
    does not tell (or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # the fields after the command name, which is in parentheses and may hold spaces
        fields = stat[stat.rindex(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _read_within_cpu_time(worker: ReadyWorker, timeout: float):
    """The worker's reply, waiting while its CPU time since now stays under `timeout` seconds
    (and the wall time under `WALL_LIMIT_FACTOR` times that); FrameTimeout past either, or past
    `timeout` of wall time where its CPU time is unknown."""
    start = time.monotonic()
    cpu_start = process_cpu_seconds(worker.proc.pid)
    wall_limit = start + WALL_LIMIT_FACTOR * timeout
    deadline = start + timeout
    while True:
        try:
            return worker.reader.read(deadline)
        except FrameTimeout:
            cpu_now = process_cpu_seconds(worker.proc.pid)
            now = time.monotonic()
            if cpu_start is None or cpu_now is None or now >= wall_limit:
                raise
            left = timeout - (cpu_now - cpu_start)
            if left <= 0:
                raise
            deadline = min(wall_limit, now + left)


def _toolkit_roots() -> list[str]:
    """Where a CUDA toolkit may be: beside nvcc, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    try:
        roots.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(find_nvcc()))))
    except Exception:  # no nvcc: the other places still count
        pass
    return [root for root in roots if root]


@functools.lru_cache(maxsize=1)
def find_cuda_include() -> str | None:
    """The directory of the CUDA headers that NVRTC does not build in (cuda_fp16.h, which
    float16 kernels include; nvcc finds them itself): a toolkit's, else the NVIDIA pip wheels'."""
    places: list[str] = []
    for root in _toolkit_roots():
        places += [
            os.path.join(root, "include"),
            os.path.join(root, "targets", "x86_64-linux", "include"),
        ]
    for path in sys.path:
        places += [os.path.join(path, "nvidia", sub, "include") for sub in ("cu13", "cuda_runtime")]
    for place in places:
        if os.path.isfile(os.path.join(place, "cuda_fp16.h")):
            return place
    return None


def _candidates() -> list[str]:
    found = []
    for root in _toolkit_roots():
        for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            found += sorted(glob.glob(os.path.join(root, sub, "libnvrtc.so*")))
    for path in sys.path:
        for sub in ("cu13", "cuda_nvrtc"):
            found += sorted(glob.glob(os.path.join(path, "nvidia", sub, "lib", "libnvrtc.so*")))
    name = ctypes.util.find_library("nvrtc")
    if name:
        found.append(name)
    return [p for p in found if "builtins" not in os.path.basename(p) and ".alt." not in p]


def find_nvrtc() -> str | None:
    """Path (or loader name) of a loadable libnvrtc, or None (then builds use nvcc)."""
    choice = os.environ.get(ENV_VAR, "").strip()
    if choice.lower() in ("0", "off", "no", "false", "nvcc"):
        return None
    for path in [choice] if choice else _candidates():
        try:
            NvrtcLibrary(path)
        except OSError:
            continue
        return path
    return None


class NvrtcLibrary:
    """The few libnvrtc calls a build needs, through ctypes (which releases the GIL)."""

    def __init__(self, path: str) -> None:
        self.path = path
        # libnvrtc dlopens its builtins library by name: load the one beside it first, so a
        # library outside the loader's path (a pip wheel, $AUTOSCHED_NVRTC) works too
        for builtins in sorted(
            glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))
        ):
            if ".alt." not in builtins:
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
                break
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def version(self) -> tuple[int, int]:
        """(major, minor) of the library."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return major.value, minor.value

    def compile(self, source: str, options: Sequence[str]) -> tuple[int, str, bytes | None]:
        """(nvrtcResult, program log, cubin or None) for one translation unit."""
        lib = self.lib
        prog = ctypes.c_void_p()
        result = lib.nvrtcCreateProgram(
            ctypes.byref(prog), source.encode(), SOURCE_NAME.encode(), 0, None, None
        )
        if result != 0:
            return result, f"nvrtcCreateProgram: {lib.nvrtcGetErrorString(result).decode()}", None
        try:
            opts = [o.encode() for o in options]
            result = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace")
            if result != 0:
                return result, log or lib.nvrtcGetErrorString(result).decode(), None
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            if size.value == 0:
                return -1, log + "\nNVRTC produced no cubin (is -arch a real sm_XX?)", None
            cubin = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetCUBIN(prog, cubin)
            return 0, log, cubin.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


class NvrtcCompiler:
    """One NVRTC worker process (`python -m measure._nvrtc_worker LIBRARY ARCH`, frames on its
    pipes); `compile` has `compile_source`'s result shape."""

    def __init__(self, path: str, arch: str) -> None:
        self.path = path
        self.arch = arch
        self._worker: ReadyWorker | None = None
        self._remove_pch_dir: weakref.finalize | None = None
        self.pch_dir: str | None = None  # the running worker's folder of precompiled headers
        self.worker_starts = 0

    @property
    def _proc(self) -> subprocess.Popen[bytes] | None:
        """The worker's process; None when it is stopped."""
        return self._worker.proc if self._worker is not None else None

    def start(self) -> ReadyWorker:
        """Start the worker now (compile starts it when needed) and return it; OSError when it
        cannot."""
        self.close()  # a worker that died, and its folder
        self.worker_starts += 1
        try:
            self.pch_dir = tempfile.mkdtemp(prefix="autosched_nvrtc_pch_")
        except OSError:  # no temporary folder: the worker parses the headers every time
            self.pch_dir = None
        else:
            # also when this compiler is collected, or at exit (after the worker is killed)
            self._remove_pch_dir = weakref.finalize(self, shutil.rmtree, self.pch_dir, True)
        folder = [self.pch_dir] if self.pch_dir is not None else []
        # start-up (interpreter, imports, loading libnvrtc) is not counted in a kernel's timeout
        try:
            worker = start_ready_worker(
                self, "measure._nvrtc_worker", self.path, self.arch, *folder, timeout=START_TIMEOUT
            )
        except WorkerStartError as exc:
            self.close()
            if exc.replied:
                raise OSError(
                    f"the NVRTC worker could not load {self.path}: {exc.detail}"
                ) from None
            raise OSError(f"the NVRTC worker did not start ({self.path}): {exc.detail}") from None
        self._worker = worker
        return worker

    def compile(
        self, source: str, extra_flags: Sequence[str] = (), timeout: float = 30.0
    ) -> tuple[MeasureErrorKind, str, bytes | None, dict[str, KernelResources]]:
        """Compile `source`: (error kind, message, cubin, ptxas resources), like
        `compile_source`. Raises OSError when the worker cannot start."""
        worker = self._worker
        if worker is None or worker.proc.poll() is not None:
            worker = self.start()
        include = find_cuda_include()
        options = [f"--gpu-architecture={self.arch}", *NVRTC_OPTIONS, *extra_flags]
        options += [f"--include-path={include}"] if include else []
        # NVRTC may answer a program it has compiled before (even in another process, even with
        # other comments) from a cache, with the cubin but without ptxas's report (seen on the
        # H100 machine); an extra empty kernel with a unique name makes every program new.
        nonce = f"{NONCE_PREFIX}{os.getpid()}_{next(_BUILD_COUNTER)}_{time.time_ns()}"
        request = {
            "source": f'{source}\nextern "C" __global__ void {nonce}() {{}}\n',
            "options": options,
        }
        try:
            write_frame(worker.stdin, request)
            reply = _read_within_cpu_time(worker, timeout)
        except FrameTimeout:
            self.close()
            return MeasureErrorKind.COMPILE_TIMEOUT, f"NVRTC ran past {timeout:g} s", None, {}
        except (FrameEOF, OSError) as exc:
            self.close()
            return MeasureErrorKind.COMPILE_ERROR, f"the NVRTC worker died: {exc}", None, {}
        log, cubin = reply["log"], reply["cubin"]
        kernels = {k: v for k, v in parse_ptxas(log).items() if not k.startswith(NONCE_PREFIX)}
        if reply["result"] == 0 and f"'{nonce}'" not in log:
            return MeasureErrorKind.UNKNOWN, "NVRTC gave a cubin without ptxas's report", None, {}
        if reply["result"] != 0 or cubin is None:
            kind, message = compile_failure(log, SOURCE_NAME, f"NVRTC failed ({reply['result']})")
            return kind, message, None, kernels
        return MeasureErrorKind.NO_ERROR, "", cubin, kernels

    @property
    def speed_options(self) -> list[str]:
        """The groups of `compile_options.NVRTC_SPEED_OPTIONS` the running worker compiles with
        (those its library accepts); empty when no worker runs."""
        return list(self._worker.hello.get("speed_options", [])) if self._worker else []

    def close(self) -> None:
        """Stop the worker (it restarts on the next `compile`) and remove its folder."""
        if self._worker is not None:
            self._worker.finalizer()  # kill_worker, once
        self._worker = None
        if self._remove_pch_dir is not None:
            self._remove_pch_dir()  # once
        self._remove_pch_dir = self.pch_dir = None
