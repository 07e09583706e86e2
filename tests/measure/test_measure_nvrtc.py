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


# ---- the compile timeout is on the worker's CPU time -------------------------------------------


def test_a_frame_read_past_its_deadline_is_read_whole_the_next_time():
    """A FrameTimeout in the middle of a frame consumes nothing: reading again returns it."""
    import io
    import time

    from measure.framing import FdFrameReader, FrameTimeout, write_frame

    frame = io.BytesIO()
    write_frame(frame, {"cubin": b"x" * 100})
    data = frame.getvalue()
    r, w = os.pipe()
    try:
        reader = FdFrameReader(r)
        os.write(w, data[:10])  # the header and part of the payload
        with pytest.raises(FrameTimeout):
            reader.read(time.monotonic() + 0.05)
        os.write(w, data[10:])
        assert reader.read(time.monotonic() + 1.0) == {"cubin": b"x" * 100}
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="no /proc")
def test_process_cpu_seconds_counts_a_processes_cpu_time():
    import time

    from measure.nvrtc import process_cpu_seconds

    before = process_cpu_seconds(os.getpid())
    start = time.process_time()
    while time.process_time() - start < 0.3:
        pass
    after = process_cpu_seconds(os.getpid())
    assert before is not None and after is not None and after - before >= 0.2
    assert process_cpu_seconds(2**22 + 12345) is None  # no such process


class _LateReader:
    """Replies once `after` seconds of wall time have passed, FrameTimeout before."""

    def __init__(self, after: float) -> None:
        import time

        self.ready_at = time.monotonic() + after

    def read(self, deadline: float):
        import time

        from measure.framing import FrameTimeout

        time.sleep(max(0.0, min(deadline, self.ready_at) - time.monotonic()))
        if time.monotonic() < self.ready_at:
            raise FrameTimeout("not yet")
        return {"result": 0}


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="no /proc")
@pytest.mark.parametrize("busy", [False, True])
def test_a_compile_times_out_on_its_own_cpu_time_not_the_wall_time(busy):
    """A worker that waits on the cores (here: sleeps) gets the wall time it needs, up to
    WALL_LIMIT_FACTOR times the timeout; one that spends the timeout's CPU seconds times out."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from measure.framing import FrameTimeout
    from measure.nvrtc import WALL_LIMIT_FACTOR, _read_within_cpu_time

    code = "while True: pass" if busy else "import time; time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        timeout = 0.2
        worker = SimpleNamespace(proc=proc, reader=_LateReader(after=timeout * 2))
        assert WALL_LIMIT_FACTOR * timeout > timeout * 2
        if busy:
            with pytest.raises(FrameTimeout):
                _read_within_cpu_time(worker, timeout)  # type: ignore[arg-type]
        else:
            assert _read_within_cpu_time(worker, timeout) == {"result": 0}  # type: ignore[arg-type]
    finally:
        proc.kill()
        proc.wait()
