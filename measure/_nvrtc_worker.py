"""The NVRTC compile worker: `python -m measure._nvrtc_worker LIBRARY ARCH` (started by
`measure.nvrtc.NvrtcCompiler`). It loads libnvrtc, checks that a trivial kernel compiles for
ARCH, says ready, then answers one frame per request frame: {"source", "options"} ->
{"result", "log", "cubin"}.
"""

from __future__ import annotations

import os
import sys

from measure.framing import FrameEOF, read_frame, write_frame
from measure.nvrtc import NvrtcLibrary

PROBE = 'extern "C" __global__ void autosched_probe(float* a) { a[threadIdx.x] = 1.0f; }'


def serve(path: str, arch: str) -> None:
    """The worker: load libnvrtc, compile a probe kernel for `arch`, say ready, then one reply
    frame per request frame on the original stdout (fd 1 goes to stderr, so nothing else can
    corrupt the frames)."""
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
    write_frame(out, {"ready": True, "version": list(lib.version())})
    stdin = sys.stdin.buffer
    while True:
        try:
            request = read_frame(stdin)
        except FrameEOF:
            return
        result, log, cubin = lib.compile(request["source"], request["options"])
        write_frame(out, {"result": result, "log": log, "cubin": cubin})


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
