"""msgpack frames: how requests and results cross the boundary to the runner's worker process.

A frame is an 8-byte little-endian payload length followed by a msgpack payload. numpy arrays
travel as `{"__ndarray__": True, "dtype": str, "shape": [...], "data": bytes}` (C order).
"""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass
from typing import IO, Any

import msgpack
import numpy as np

_HEADER = struct.Struct("<Q")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ND_KEY = "__ndarray__"


class FrameTimeout(Exception):
    """No complete frame arrived before the deadline."""


class FrameEOF(Exception):
    """The other end closed the stream (the worker died, or the parent went away)."""


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        return {
            _ND_KEY: True,
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
            "data": arr.tobytes(),
        }
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__} into a measure frame")


def _object_hook(obj: dict) -> Any:
    if obj.get(_ND_KEY) is True:
        dtype = np.dtype(obj["dtype"])
        return np.frombuffer(obj["data"], dtype=dtype).reshape(obj["shape"]).copy()
    return obj


def pack(obj: Any) -> bytes:
    """Serialise `obj` (dicts, lists, scalars, bytes, str, numpy arrays) to msgpack bytes."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """Inverse of `pack`; arrays come back as writable numpy arrays."""
    return msgpack.unpackb(data, object_hook=_object_hook, raw=False, strict_map_key=False)


def write_frame(stream: IO[bytes], obj: Any) -> None:
    """Write one frame holding `obj` to a binary stream and flush it."""
    payload = pack(obj)
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """Read one frame from a blocking binary stream; raises FrameEOF at end of stream."""
    header = _read_exactly(stream, _HEADER.size)
    (size,) = _HEADER.unpack(header)
    return unpack(_read_exactly(stream, size))


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise FrameEOF("stream closed in the middle of a frame" if chunks else "stream closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class FdFrameReader:
    """Reads frames from a raw file descriptor with a deadline (used by the parent process)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()

    def read(self, deadline: float | None) -> Any:
        """Return the next frame's object; FrameTimeout past `deadline` (time.monotonic()). A
        timeout consumes nothing: reading again goes on with the same frame."""
        self._fill(_HEADER.size, deadline)
        (size,) = _HEADER.unpack(self._buffer[: _HEADER.size])
        end = _HEADER.size + size
        self._fill(end, deadline)
        data = bytes(self._buffer[_HEADER.size : end])
        del self._buffer[:end]
        return unpack(data)

    def _fill(self, size: int, deadline: float | None) -> None:
        """Read until the buffer holds at least `size` bytes."""
        while len(self._buffer) < size:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._fd], [], [], wait)
            if not ready:
                raise FrameTimeout(f"no frame within the deadline ({len(self._buffer)} bytes read)")
            chunk = os.read(self._fd, max(65536, size - len(self._buffer)))
            if not chunk:
                raise FrameEOF("the worker closed its output")
            self._buffer += chunk


def start_worker(module: str, *args: str) -> subprocess.Popen[bytes]:
    """Start `python -m module args...` with frame pipes on stdin/stdout, in its own session (a
    Ctrl-C to the parent does not hit it mid-kernel; `kill_worker` takes its children too)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )


class WorkerStartError(Exception):
    """A worker sent no "ready" frame in time (`replied` False) or said it is not ready
    (`replied` True; `detail` is its error)."""

    def __init__(self, detail: str, replied: bool) -> None:
        super().__init__(detail)
        self.detail, self.replied = detail, replied


@dataclass
class ReadyWorker:
    """A started worker: its process, the pipe to its stdin, a reader of its frames, the
    finalizer that kills it (once; also when `owner` is collected), and its first ("ready")
    frame."""

    proc: subprocess.Popen[bytes]
    stdin: IO[bytes]
    reader: FdFrameReader
    finalizer: weakref.finalize
    hello: dict


def start_ready_worker(owner: object, module: str, *args: str, timeout: float) -> ReadyWorker:
    """`start_worker`, then wait up to `timeout` seconds for its first frame, which must have
    `ready` true; else kill it and raise WorkerStartError."""
    proc = start_worker(module, *args)
    assert proc.stdin is not None and proc.stdout is not None  # start_worker opens both pipes
    reader = FdFrameReader(proc.stdout.fileno())
    finalizer = weakref.finalize(owner, kill_worker, proc)
    try:
        hello = reader.read(time.monotonic() + timeout)
    except (FrameTimeout, FrameEOF) as exc:
        finalizer()
        raise WorkerStartError(str(exc), replied=False) from None
    if not hello.get("ready"):
        finalizer()
        raise WorkerStartError(str(hello.get("error")), replied=True)
    return ReadyWorker(proc, proc.stdin, reader, finalizer, hello)


def kill_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker's process group if it still runs, close its pipes, and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    for stream in (proc.stdin, proc.stdout):
        if stream is None:
            continue
        try:
            stream.close()
        except Exception:
            pass
    try:
        proc.wait(timeout=30.0)
    except subprocess.TimeoutExpired:
        pass
