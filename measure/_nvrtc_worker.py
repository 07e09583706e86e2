"""The NVRTC compile worker: `python -m measure._nvrtc_worker LIBRARY ARCH [PCH_DIR]` (started
by `measure.nvrtc.NvrtcCompiler`). It loads libnvrtc, checks that a trivial kernel compiles for
ARCH, finds which of `NVRTC_SPEED_OPTIONS` its library accepts (precompiled headers only with a
PCH_DIR, a folder of its own), says ready (naming them), then answers one frame per request
frame: {"source", "options"} -> {"result", "log", "cubin"}, compiled with the request's options
and the accepted speed options.
"""

from __future__ import annotations

import os
import sys

from measure.compile_options import NVRTC_SPEED_OPTIONS
from measure.framing import FrameEOF, read_frame, write_frame
from measure.nvrtc import NvrtcLibrary

PROBE = 'extern "C" __global__ void autosched_probe(float* a) { a[threadIdx.x] = 1.0f; }'


def accepted_speed_options(
    lib: NvrtcLibrary, arch: str, pch_dir: str | None
) -> dict[str, list[str]]:
    """The groups of `NVRTC_SPEED_OPTIONS` with which the probe kernel still compiles (an
    option the library does not know fails every compilation), `{pch_dir}` filled in; "pch"
    only when there is a folder for it."""
    accepted = {}
    for name, group in NVRTC_SPEED_OPTIONS.items():
        if pch_dir is None and any("{pch_dir}" in option for option in group):
            continue
        options = [option.format(pch_dir=pch_dir) for option in group]
        if lib.compile(PROBE, [f"--gpu-architecture={arch}", *options])[0] == 0:
            accepted[name] = options
    return accepted


def serve(path: str, arch: str, pch_dir: str | None = None) -> None:
    """The worker: load libnvrtc, compile a probe kernel for `arch`, find the speed options the
    library accepts, say ready, then one reply frame per request frame on the original stdout
    (fd 1 goes to stderr, so nothing else can corrupt the frames)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        lib = NvrtcLibrary(path)
    except OSError as exc:
        write_frame(out, {"ready": False, "error": str(exc)})
        return
    result, log, _ = lib.compile(PROBE, [f"--gpu-architecture={arch}"])
    if result != 0:
        write_frame(
            out, {"ready": False, "error": f"a trivial kernel does not compile: {log.strip()}"}
        )
        return
    speed = accepted_speed_options(lib, arch, pch_dir)
    extra = [option for group in speed.values() for option in group]
    write_frame(out, {"ready": True, "version": list(lib.version()), "speed_options": list(speed)})
    stdin = sys.stdin.buffer
    while True:
        try:
            request = read_frame(stdin)
        except FrameEOF:
            return
        result, log, cubin = lib.compile(request["source"], [*request["options"], *extra])
        write_frame(out, {"result": result, "log": log, "cubin": cubin})


if __name__ == "__main__":
    serve(*sys.argv[1:4])
