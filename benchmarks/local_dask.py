"""Start a Dask cluster on this host, one worker per GPU, as `autosched` expects one: what
`dask scheduler` and `CUDA_VISIBLE_DEVICES=i dask worker ADDRESS --nthreads 1 --resources GPU=1`
do by hand (the `distributed` extra must be importable).

    with gpu_cluster([0, 1]) as address:
        context = DaskMeasureContext(address)
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def gpu_cluster(devices: list[int], startup_timeout: float = 120.0):
    """Yield the address of a scheduler with one single-threaded worker per device (each
    seeing only its GPU, offering the resource GPU=1); all are stopped on exit."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    python = [sys.executable, "-m"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            python
            + ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port)]
            + ["--no-dashboard"],
            **quiet,
        )
    ]
    try:
        for d in devices:
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(d))
            cmd = python + ["distributed.cli.dask_worker", address, "--nthreads", "1"]
            cmd += ["--resources", "GPU=1", "--no-dashboard", "--memory-limit", "0"]
            cmd += ["--name", f"gpu{d}"]
            procs.append(subprocess.Popen(cmd, env=env, **quiet))
        _wait_for_workers(address, len(devices), startup_timeout)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def _wait_for_workers(address: str, n: int, timeout: float) -> None:
    from distributed import Client

    deadline = time.monotonic() + timeout
    while True:
        try:
            with Client(address, timeout=10) as client:
                client.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
