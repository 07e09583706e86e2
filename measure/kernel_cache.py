"""A cache of compiled kernels keyed by everything that determines the cubin, so that a search
that meets a source again (a resumed run, another task with an identical kernel, a repeated
candidate) does not compile it again.

The key hashes the source, the architecture, the back end and its options (the builder's extra
flags and measure/compile_options.py's), and the compiler itself (its path, size and
modification time: an upgraded toolkit is another compiler). The value is the compiler's outcome
(error kind, message, cubin, ptxas's resources). Only cubins are kept: a timeout, a failed
worker, even a compile error may come from the machine's load (a killed compiler) and is tried
again.

Entries live in memory (least recently used first out, bounded in bytes) and, when a folder is
given, on disk too (one file per key, oldest out once the folder passes its bound), so that they
outlive the process.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import msgpack

from measure.compile_options import NVCC_OPTIONS, NVRTC_OPTIONS
from measure.errors import MeasureErrorKind
from measure.ptxas import KernelResources

# (error kind, message, cubin or None, resources per entry function): a compiler's outcome
Outcome = tuple[MeasureErrorKind, str, bytes | None, dict[str, KernelResources]]

FORMAT_VERSION = 1  # bump when the stored form or what the key covers changes
DEFAULT_MEMORY_BYTES = 256 << 20
DEFAULT_DISK_BYTES = 2 << 30
DEFAULT_FOLDER = Path("~/.cache/autosched/kernels")
TRIM_EVERY = 64  # disk writes between two trims of the folder (a trim lists every file)
_BACKEND_OPTIONS = {"nvrtc": NVRTC_OPTIONS, "nvcc": NVCC_OPTIONS}


def compiler_identity(compiler: str, path: str | None) -> str:
    """The back end's name, path, size and modification time (only the name and path when the
    file cannot be read)."""
    if path is None:
        return compiler
    try:
        st = os.stat(path)
    except OSError:
        return f"{compiler}:{path}"
    return f"{compiler}:{path}:{st.st_size}:{st.st_mtime_ns}"


def cache_key(source: str, arch: str, compiler: str, flags: Sequence[str]) -> str:
    """Hex digest of what determines a cubin: `compiler` is `compiler_identity(...)`, `flags`
    the builder's extra flags (the back end's own options are added here)."""
    backend = compiler.split(":", 1)[0]
    parts = [
        f"v{FORMAT_VERSION}",
        arch,
        compiler,
        "\0".join(_BACKEND_OPTIONS.get(backend, ())),
        "\0".join(flags),
        source,
    ]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _size(outcome: Outcome) -> int:
    """Bytes an entry roughly holds: its cubin and message, plus a little for the rest."""
    return len(outcome[2] or b"") + len(outcome[1]) + 256


def _pack(outcome: Outcome) -> bytes:
    kind, message, cubin, kernels = outcome
    kernel_dicts = {k: v.to_dict() for k, v in kernels.items()}
    return msgpack.packb([FORMAT_VERSION, int(kind), message, cubin, kernel_dicts])


def _unpack(data: bytes) -> Outcome | None:
    """The outcome stored in `data`, or None when it is of another format or damaged."""
    try:
        version, kind, message, cubin, kernels = msgpack.unpackb(data)
        if version != FORMAT_VERSION:
            return None
        resources = {k: KernelResources.from_dict(v) for k, v in kernels.items()}
        return MeasureErrorKind(kind), message, cubin, resources
    except Exception:  # a truncated or foreign file is a miss, never a failed build
        return None


class KernelCache:
    """Compiler outcomes by `cache_key`, in memory (at most `memory_bytes`) and, when `folder`
    is given, on disk (at most `disk_bytes`). Thread-safe: a builder's threads share one.
    `hits` and `misses` count lookups."""

    def __init__(
        self,
        folder: str | os.PathLike[str] | None = None,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        disk_bytes: int = DEFAULT_DISK_BYTES,
    ) -> None:
        self.folder = Path(folder).expanduser() if folder is not None else None
        self.memory_bytes = memory_bytes
        self.disk_bytes = disk_bytes
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, Outcome] = OrderedDict()
        self._held = 0
        self._writes = 0
        self._compiling: dict[str, threading.Event] = {}  # keys being compiled now
        self._lock = threading.Lock()
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> Outcome | None:
        """The outcome stored under `key` (memory first, then disk), or None."""
        with self._lock:
            outcome = self._entries.get(key)
            if outcome is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return outcome
        outcome = self._read(key)
        with self._lock:
            if outcome is None:
                self.misses += 1
                return None
            self.hits += 1
            self._remember(key, outcome)
        return outcome

    def get_or_compile(self, key: str, compile_source: Callable[[], Outcome]) -> Outcome:
        """The stored outcome, else `compile_source()`'s (stored when it is a cubin). Threads
        asking for one key at once compile it once: the others wait for that outcome (and
        compile themselves only when it failed)."""
        outcome = self.get(key)
        if outcome is not None:
            return outcome
        with self._lock:
            running = self._compiling.get(key)
            if running is None:
                self._compiling[key] = threading.Event()
        if running is not None:
            running.wait()
            return self.get(key) or compile_source()
        try:
            outcome = compile_source()
            self.put(key, outcome)
            return outcome
        finally:
            with self._lock:
                self._compiling.pop(key).set()

    def put(self, key: str, outcome: Outcome) -> None:
        """Keep `outcome` when it is a cubin (a failure is never kept)."""
        if outcome[0] != MeasureErrorKind.NO_ERROR or outcome[2] is None:
            return
        with self._lock:
            self._remember(key, outcome)
        self._write(key, outcome)

    def __len__(self) -> int:
        return len(self._entries)

    def _remember(self, key: str, outcome: Outcome) -> None:
        """Add to memory and drop the least recently used past the bound (lock held)."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._held -= _size(old)
        self._entries[key] = outcome
        self._held += _size(outcome)
        while self._held > self.memory_bytes and len(self._entries) > 1:
            _, dropped = self._entries.popitem(last=False)
            self._held -= _size(dropped)

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{key}.kernel"

    def _read(self, key: str) -> Outcome | None:
        if self.folder is None:
            return None
        path = self._path(key)
        try:
            data = path.read_bytes()
            os.utime(path)  # recently used: last to go when the folder is trimmed
        except OSError:
            return None
        return _unpack(data)

    def _write(self, key: str, outcome: Outcome) -> None:
        """Store on disk (written aside, then renamed: a reader never sees half a file), then
        trim the folder. A folder that cannot be written costs the cache, not the build."""
        if self.folder is None:
            return
        path = self._path(key)
        part = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
        try:
            part.write_bytes(_pack(outcome))
            os.replace(part, path)
            with self._lock:
                self._writes += 1
                trim = self._writes >= TRIM_EVERY
                if trim:
                    self._writes = 0
            if trim:
                self._trim()
        except OSError:
            part.unlink(missing_ok=True)

    def _trim(self) -> None:
        """Remove the least recently used files while the folder holds more than `disk_bytes`."""
        assert self.folder is not None
        files = []
        for path in self.folder.glob("*.kernel"):
            try:
                st = path.stat()
            except OSError:  # removed by another process meanwhile
                continue
            files.append((st.st_mtime_ns, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.disk_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
