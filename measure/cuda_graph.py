"""CUDA graphs through the driver API (ctypes), for pycuda builds that have no graph API.

Stream capture records the work a function enqueues on a stream into a graph instead of running
it; one `cuGraphLaunch` of the instantiated graph then submits all of it. Timing a replay between
CUDA events measures the GPU's time for the work, not the host's launch rate, which is what
bounds back-to-back launches of kernels of a few microseconds.

Only asynchronous work may be enqueued while capturing (pycuda launches with a `stream`); a
synchronous call (an allocation, a copy, a context synchronisation) makes the capture fail.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from measure.cuda_driver import SUCCESS, CudaDriver, DriverError

# Capture mode: only this thread's calls are checked for actions that are illegal while
# capturing (another thread of the process may go on allocating or copying).
_CAPTURE_MODE_THREAD_LOCAL = 1


class GraphError(DriverError):
    """A driver call of capture, instantiation, replay or release failed."""


class Graph:
    """An instantiated graph (a CUgraphExec) of one context; replayable on any of its streams.
    `close()` releases it (also on leaving a `with` block)."""

    def __init__(self, driver: GraphDriver, handle: ctypes.c_void_p) -> None:
        self._driver = driver
        self._handle: ctypes.c_void_p | None = handle

    def launch(self, stream: int) -> None:
        """Enqueue one replay of the whole graph on `stream` (a raw CUstream handle)."""
        if self._handle is None:
            raise GraphError("the graph was closed")
        self._driver.call("cuGraphLaunch", self._handle, ctypes.c_void_p(stream))

    def close(self) -> None:
        """Release the instantiated graph (idempotent; never raises: after a sticky CUDA error
        the release fails too, and the error that matters was raised before)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                self._driver.call("cuGraphExecDestroy", handle)
            except GraphError:
                pass

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GraphDriver(CudaDriver):
    """libcuda's capture and graph entry points."""

    error = GraphError
    SIGNATURES = {
        "cuCtxGetCurrent": (ctypes.POINTER(ctypes.c_void_p),),
        "cuStreamBeginCapture_v2": (ctypes.c_void_p, ctypes.c_int),
        "cuStreamEndCapture": (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)),
        "cuGraphInstantiateWithFlags": (
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
            ctypes.c_ulonglong,
        ),
        "cuGraphLaunch": (ctypes.c_void_p, ctypes.c_void_p),
        "cuGraphExecDestroy": (ctypes.c_void_p,),
        "cuGraphDestroy": (ctypes.c_void_p,),
    }

    def has_current_context(self) -> bool:
        """Whether a CUDA context is current on this thread (where capture happens)."""
        ctx = ctypes.c_void_p()
        code = self._functions["cuCtxGetCurrent"](ctypes.byref(ctx))
        return code == SUCCESS and bool(ctx.value)

    def capture(self, stream: int, record: Callable[[], object]) -> Graph:
        """Capture what `record()` enqueues on `stream` (a raw CUstream handle, not the legacy
        default stream 0) and instantiate it. The stream leaves capture mode whatever happens;
        an exception of `record` propagates (the partial graph is dropped)."""
        handle = ctypes.c_void_p(stream)
        self.call("cuStreamBeginCapture_v2", handle, _CAPTURE_MODE_THREAD_LOCAL)
        graph = ctypes.c_void_p()
        try:
            record()
        except BaseException:
            if self._functions["cuStreamEndCapture"](handle, ctypes.byref(graph)) == SUCCESS:
                self._destroy_graph(graph)
            raise
        self.call("cuStreamEndCapture", handle, ctypes.byref(graph))
        try:
            instance = ctypes.c_void_p()
            self.call("cuGraphInstantiateWithFlags", ctypes.byref(instance), graph, 0)
        finally:
            self._destroy_graph(graph)
        return Graph(self, instance)

    def _destroy_graph(self, graph: ctypes.c_void_p) -> None:
        if graph.value:
            self._functions["cuGraphDestroy"](graph)


def load_graph_driver() -> GraphDriver | None:
    """The driver's graph API, or None when libcuda does not load, lacks an entry point, or no
    CUDA context is current on this thread. (The last check also keeps a stand-in pycuda, as in
    the CPU tests, from handing the real driver made-up stream handles.)"""
    try:
        driver = GraphDriver.load()
    except (OSError, AttributeError):
        return None
    return driver if driver.has_current_context() else None


def stream_handle(stream) -> int:
    """The raw CUstream of a pycuda Stream (`handle_int`; `handle` in older pycuda)."""
    return int(getattr(stream, "handle_int", None) or stream.handle)
