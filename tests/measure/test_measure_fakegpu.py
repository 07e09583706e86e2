"""CPU tests of the runner's process handling, against a fake `pycuda` (no GPU needed).

The fake driver (written to a temporary directory and put first on the path of the parent and of
the worker) runs "kernels" on the host: the cubin bytes name a behaviour (add, wrong, crash, hang,
print). This exercises the real worker, framing, reference caching, timeouts, kills and restarts.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from measure import (
    ArgSpec,
    BuildResult,
    KernelArtifact,
    Launch,
    LocalRunner,
    MeasureErrorKind,
    RunResult,
    make_reference,
)

FAKE_DRIVER = r"""
import time
import numpy as np

class Error(Exception): pass
class LaunchError(Error): pass
class LogicError(Error): pass

class _NS:
    def __init__(self, **kw): self.__dict__.update(kw)

device_attribute = _NS(MAX_SHARED_MEMORY_PER_BLOCK="smem")
function_attribute = _NS(MAX_THREADS_PER_BLOCK="threads", SHARED_SIZE_BYTES="static",
                         MAX_DYNAMIC_SHARED_SIZE_BYTES="dyn")
_memory = {}  # allocation base address -> its bytes
_pending = []
_N = 4096  # floats per kernel argument (the tests' ARGS)
launched = []  # the first buffer of every kernel launch, in order
prepared = []  # (module data, stream, kernels launched before) of every prepared call
flushed = []  # (bytes, stream, prepared calls before) of every asynchronous 32-bit memset

def init(): pass

class Device:
    def __init__(self, i): self.i = i
    @staticmethod
    def count(): return 1
    def name(self): return "FakeGPU"
    def compute_capability(self): return (9, 0)
    def get_attribute(self, a): return 48 * 1024
    def make_context(self): return Context()

class Context:
    def pop(self): pass
    @staticmethod
    def synchronize():
        while _pending:
            _pending.pop(0)()

class _Alloc:
    _next = 1 << 20
    def __init__(self, n):
        self.ptr = _Alloc._next; _Alloc._next += n + 256; _memory[self.ptr] = bytearray(n)
    def __int__(self): return self.ptr
    def free(self): _memory.pop(self.ptr, None)

def mem_alloc(n): return _Alloc(n)
def _at(ptr, n):
    # the n bytes at address ptr, inside whichever allocation holds them
    ptr = int(ptr)
    base = max(b for b in _memory if b <= ptr)
    return memoryview(_memory[base])[ptr - base: ptr - base + n]

def memset_d8(dst, value, n): _at(dst, n)[:] = bytes([value]) * n
def memset_d32_async(dst, value, count, stream=None):
    flushed.append((4 * count, stream, len(prepared)))
    _pending.append(lambda: _at(dst, 4 * count).__setitem__(slice(None), bytes(4 * count)))
def memcpy_htod(dst, src): b = src.tobytes(); _at(dst, len(b))[:] = b
def memcpy_dtod(dst, src, n): _at(dst, n)[:] = bytes(_at(src, n))
def memcpy_dtoh(dst, src):
    dst.view(np.uint8).ravel()[:] = np.frombuffer(_at(src, dst.nbytes), np.uint8)

class Stream:
    def __init__(self, flags=0): self.handle_int = id(self); self.flags = flags
    def synchronize(self): Context.synchronize()

class Event:
    def record(self, stream=None):
        Context.synchronize(); self.t = time.perf_counter()
    def synchronize(self): Context.synchronize()
    def time_since(self, other): return (self.t - other.t) * 1e3

class _Function:
    def __init__(self, behaviour): self.behaviour = behaviour
    def get_attribute(self, a): return 1024 if a == "threads" else 0
    def set_attribute(self, a, v): pass
    def prepare(self, arg_types): self.arg_types = arg_types
    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        # only the worker's empty settling kernel is launched this way
        prepared.append((self.behaviour, stream, len(launched)))
    def _launch_kernel(self, grid, block, params, shared, stream):
        ptrs = np.frombuffer(params, np.uint64).tolist()
        launched.append(ptrs[0])
        def run():
            a, b, c = (np.frombuffer(bytes(_at(p, 4 * _N)), np.float32) for p in ptrs)
            if self.behaviour == b"crash":
                raise LaunchError("cuCtxSynchronize failed: an illegal memory access")
            if self.behaviour == b"hang":
                time.sleep(3600)
            if self.behaviour == b"print":
                print("kernel printf output that must not corrupt the frames", flush=True)
            out = a + b + (np.float32(1) if self.behaviour == b"wrong" else np.float32(0))
            _at(ptrs[2], 4 * _N)[:] = out.tobytes()
            if self.behaviour == b"scribble":  # right answer, then garbage over its input
                _at(ptrs[0], 4 * _N)[:] = (a + 7).tobytes()
            if self.behaviour == b"overrun":  # right answer, then 4 bytes past its output
                _at(ptrs[2] + 4 * _N, 4)[:] = bytes(4)
            if self.behaviour == b"underrun":  # right answer, then 4 bytes before its input
                _at(ptrs[0] - 4, 4)[:] = bytes(4)
            if self.behaviour == b"stomp":  # right answer, then out-of-bounds garbage elsewhere
                for p in list(_memory):
                    if p not in ptrs and len(_memory[p]) == 4 * _N:
                        _memory[p][:] = (a + 7).tobytes()
        _pending.append(run)

class _Module:
    def __init__(self, data): self.data = data
    def get_function(self, name): return _Function(self.data)

def module_from_buffer(data): return _Module(bytes(data))
"""

N = 4096
ARGS = (
    ArgSpec("a", (N,), "float32"),
    ArgSpec("b", (N,), "float32"),
    ArgSpec("c", (N,), "float32", is_output=True),
)


def install_fake_pycuda(tmp_path, monkeypatch, driver_source: str):
    """Generator for a fixture: a `pycuda` package whose driver is `driver_source`, first on
    the path of this process and of the workers it starts; removed from sys.modules after."""
    pkg = tmp_path / "pycuda"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "driver.py").write_text(driver_source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    importlib.invalidate_caches()
    yield
    # Only the worker imports the fake; should this process have too, forget it (and only it).
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "")).startswith(str(tmp_path)):
            del sys.modules[name]


@pytest.fixture()
def fake_pycuda(tmp_path, monkeypatch):
    yield from install_fake_pycuda(tmp_path, monkeypatch, FAKE_DRIVER)


# Tests of other things than rotation time the same buffers every run (rotate_inputs=False):
# with rotation, a fake candidate's 48 KB of buffers would be copied 1024 times and run 1024
# times a repeat on the host. Rotation has its own tests, and the first test runs it end to end.


def candidate(behaviour: str, ref_id: str | None = "add"):
    art = KernelArtifact("// fake", (Launch("k", (N // 256,), (256,)),), ARGS, ref_id)
    return art, BuildResult(behaviour.encode(), {})


def add_reference():
    return make_reference(ARGS, lambda a, b: a + b, seed=1)


def test_fake_runner_measures_checks_and_recovers(fake_pycuda):
    refs = {"add": add_reference()}
    names = ["add", "wrong", "crash", "add", "print", "add"]
    arts, builds = zip(*(candidate(n) for n in names), strict=True)
    with LocalRunner(number=2, repeat=3, min_repeat_ms=1.0, timeout=20.0) as runner:
        results = runner.run(arts, builds, refs)
        kinds = [r.error_kind for r in results]
        assert kinds == [
            MeasureErrorKind.NO_ERROR,
            MeasureErrorKind.WRONG_ANSWER,
            MeasureErrorKind.RUNTIME_ERROR,
            MeasureErrorKind.NO_ERROR,
            MeasureErrorKind.NO_ERROR,
            MeasureErrorKind.NO_ERROR,
        ], [r.error_msg for r in results]
        assert len(results[0].costs) == 3 and all(c > 0 for c in results[0].costs)
        assert "out of tolerance" in results[1].error_msg
        assert "illegal memory access" in results[2].error_msg
        assert runner.worker_starts == 2  # restarted after the crash only
        assert runner.device_name == "FakeGPU (sm_90)"
        assert runner.phase_seconds["time"] > 0 and runner.phase_seconds["check"] > 0
        # no libcuda graph API behind a fake driver (no CUDA context is current): every
        # candidate that got as far as timing was timed back-to-back, and counted
        assert runner.back_to_back_timings == 4


def test_a_candidate_that_overwrites_its_inputs_does_not_spoil_the_next(fake_pycuda):
    """Inputs come from a pristine device copy per candidate, so a kernel writing into its input
    buffers (a wrong schedule can) leaves the next candidate's inputs intact."""
    refs = {"add": add_reference()}
    arts, builds = zip(*(candidate(n) for n in ["scribble", "add", "wrong"]), strict=True)
    with LocalRunner(number=1, repeat=1, min_repeat_ms=0.0, rotate_inputs=False) as runner:
        kinds = [r.error_kind for r in runner.run(arts, builds, refs)]
    assert kinds == [
        MeasureErrorKind.NO_ERROR,
        MeasureErrorKind.NO_ERROR,
        MeasureErrorKind.WRONG_ANSWER,
    ]


def test_inputs_spoiled_out_of_bounds_fail_no_correct_candidate(fake_pycuda):
    """A kernel whose stray writes land in the worker's pristine inputs (device memory too)
    would make the next candidate fail the check: the worker finds the pristine copy spoiled,
    uploads the inputs afresh and judges the candidate again. A wrong one stays wrong."""
    refs = {"add": add_reference()}
    names = ["add", "stomp", "add", "stomp", "wrong", "add"]
    arts, builds = zip(*(candidate(n) for n in names), strict=True)
    with LocalRunner(number=1, repeat=1, min_repeat_ms=0.0, rotate_inputs=False) as runner:
        kinds = [r.error_kind for r in runner.run(arts, builds, refs)]
    ok, wrong = MeasureErrorKind.NO_ERROR, MeasureErrorKind.WRONG_ANSWER
    assert kinds == [ok, ok, ok, ok, wrong, ok]


def test_a_kernel_writing_just_outside_its_arguments_is_wrong(fake_pycuda):
    """Each argument lies between guard bands (measure/guard_bands.py): a store past either end
    is refused where it happens, though the outputs match, and the next candidate is fine."""
    refs = {"add": add_reference()}
    names = ["overrun", "add", "underrun", "add"]
    arts, builds = zip(*(candidate(n) for n in names), strict=True)
    with LocalRunner(number=1, repeat=1, min_repeat_ms=0.0, rotate_inputs=False) as runner:
        results = runner.run(arts, builds, refs)
    ok, wrong = MeasureErrorKind.NO_ERROR, MeasureErrorKind.WRONG_ANSWER
    assert [r.error_kind for r in results] == [wrong, ok, wrong, ok]
    assert "out of bounds" in results[0].error_msg and "c (after)" in results[0].error_msg
    assert "a (before)" in results[2].error_msg


@pytest.mark.timeout(60)  # a runner that never kills the hang fails here
def test_fake_runner_timeout_kills_and_restarts(fake_pycuda):
    refs = {"add": add_reference()}
    arts, builds = zip(*(candidate(n) for n in ["hang", "add"]), strict=True)
    with LocalRunner(
        number=1, repeat=2, min_repeat_ms=1.0, timeout=1.5, rotate_inputs=False
    ) as runner:
        hang, good = runner.run(arts, builds, refs)
        assert hang.error_kind == MeasureErrorKind.RUN_TIMEOUT
        assert good.error_kind == MeasureErrorKind.NO_ERROR, good.error_msg
        assert runner.worker_starts == 2


def test_fake_runner_without_reference_times_random_inputs(fake_pycuda):
    art, build = candidate("wrong", ref_id=None)  # nothing to check against: timed only
    failed = BuildResult(None, {}, MeasureErrorKind.COMPILE_ERROR, "boom")
    with LocalRunner(number=1, repeat=2, min_repeat_ms=1.0, rotate_inputs=False) as runner:
        timed, skipped = runner.run([art, art], [build, failed], {})
    assert timed.error_kind == MeasureErrorKind.NO_ERROR and len(timed.costs) == 2
    assert skipped.error_kind == MeasureErrorKind.COMPILE_ERROR and skipped.error_msg == "boom"


def test_fake_runner_sends_each_reference_once(fake_pycuda):
    refs = {"add": add_reference()}
    with LocalRunner(number=1, repeat=1, min_repeat_ms=0.0, rotate_inputs=False) as runner:
        art, build = candidate("add")
        runner.start()
        first = runner._request(art, build.cubin, refs["add"])
        second = runner._request(art, build.cubin, refs["add"])
        assert first["ref"] is not None and second["ref"] is None
        with pytest.raises(KeyError, match="missing"):
            runner.run([candidate("add", "missing")[0]], [build], refs)


class FakeGraphs:
    """Stands in for measure.cuda_graph.GraphDriver over the fake driver: a capture keeps the
    runs `record` queued (instead of running them), a replay queues them again."""

    def __init__(self, drv, fail: bool = False) -> None:
        self.drv, self.fail = drv, fail
        self.captured: list[int] = []  # runs queued per capture
        self.replays = 0

    def capture(self, stream: int, record):
        from measure.cuda_graph import GraphError

        if self.fail:
            raise GraphError("cuStreamBeginCapture_v2 failed: CUDA_ERROR_NOT_SUPPORTED")
        pending = self.drv._pending
        before = len(pending)
        record()
        runs = pending[before:]
        del pending[before:]
        self.captured.append(len(runs))
        return _FakeGraph(self, runs)


class _FakeGraph:
    def __init__(self, owner: FakeGraphs, runs: list) -> None:
        self.owner, self.runs = owner, runs

    def launch(self, stream: int) -> None:
        self.owner.replays += 1
        self.owner.drv._pending.extend(self.runs)

    def close(self) -> None:
        self.runs = []


@pytest.mark.parametrize("fail", [False, True], ids=["graph", "refused"])
def test_worker_times_by_graph_replay_or_falls_back(fake_pycuda, monkeypatch, fail):
    """The worker (in this process, on the fake driver) captures the runs of a repeat in a graph
    of at most MAX_GRAPH_LAUNCHES launches and replays it; when the driver refuses capture, it
    times back-to-back launches and says so in the reply."""
    import pycuda.driver as drv

    from measure import _worker, timers

    monkeypatch.setattr(timers, "MAX_GRAPH_LAUNCHES", 8)
    graphs = FakeGraphs(drv, fail)
    worker = _worker.Worker(drv, drv.Device(0), graphs)
    art, build = candidate("add")
    with LocalRunner(number=3, repeat=3, min_repeat_ms=2.0, rotate_inputs=False) as runner:
        request = runner._request(art, build.cubin, add_reference())
    reply = worker.handle(request)
    assert reply["error_kind"] == 0, reply["error_msg"]
    assert len(reply["costs"]) == 3 and all(c > 0 for c in reply["costs"])
    if fail:
        assert reply["timing"] == "back-to-back" and not graphs.captured
        return
    assert reply["timing"] == "graph"
    # the probe's graph of 3 runs, then one of at most 8 launches (a launch per run here),
    # replayed so that each repeat lasts 2 ms: captured again only when the size changed
    assert graphs.captured[0] == 3 and len(graphs.captured) <= 3
    assert max(graphs.captured) <= 8 and graphs.replays > len(graphs.captured)


@pytest.mark.parametrize("sets", [1, 3])
def test_worker_rotates_timed_runs_over_buffer_sets(fake_pycuda, sets):
    """With `rotate_bytes` spanning three sets of the candidate's buffers, consecutive timed runs
    read from three different input buffers in turn (inputs copied from the checked set), a
    repeat runs every set once at least (3 runs where 2 were asked), and every extra set is
    freed with the candidate; without rotation one set serves every run."""
    import pycuda.driver as drv

    from measure import _worker

    worker = _worker.Worker(drv, drv.Device(0), None)
    art, build = candidate("add")
    with LocalRunner(number=2, repeat=2, min_repeat_ms=0.0, rotate_inputs=sets > 1) as runner:
        request = runner._request(art, build.cubin, add_reference())
    set_bytes = sum(a.nbytes for a in ARGS)
    request["rotate_bytes"] = sets * set_bytes if sets > 1 else 0
    allocated = len(drv._memory)
    reply = worker.handle(request)
    assert reply["error_kind"] == 0, reply["error_msg"]
    timed = drv.launched[1:]  # after the checked run
    per_repeat = max(2, sets)
    assert len(timed) == 2 * per_repeat
    assert len(set(timed)) == sets
    assert timed[:per_repeat] * 2 == timed and timed[:sets] == sorted(set(timed), key=timed.index)
    # pristine inputs stay cached per reference; the candidate's sets are all freed
    assert len(drv._memory) == allocated + sum(1 for a in ARGS if not a.is_output)


def test_copy_sets_fills_every_set_with_the_buffers_contents():
    """measure.rotation.copy_sets on a byte-array "device": 7 sets of three buffers (sizes not
    multiples of the alignment, one empty), each buffer aligned and equal to its original."""
    from measure.rotation import SET_ALIGN, copy_sets, set_pointers

    class Memory:
        """A driver whose device memory is one byte array, addresses offsets into it."""

        def __init__(self) -> None:
            self.bytes = bytearray(1 << 16)
            self.next = SET_ALIGN

        def mem_alloc(self, n: int) -> int:  # aligned, as cuMemAlloc's are
            at = self.next
            self.next += -(-n // SET_ALIGN) * SET_ALIGN + SET_ALIGN
            return at

        def memcpy_dtod(self, dst: int, src: int, n: int) -> None:
            self.bytes[dst : dst + n] = self.bytes[src : src + n]

    drv = Memory()
    sizes = [100, 0, 300]
    buffers = [drv.mem_alloc(max(1, n)) for n in sizes]
    for k, (buf, n) in enumerate(zip(buffers, sizes, strict=True)):
        drv.bytes[buf : buf + n] = bytes((k * 31 + i) % 251 for i in range(n))
    block = copy_sets(drv, sizes, buffers, 7)
    sets = set_pointers(sizes, block, 7)
    assert len({tuple(s) for s in sets}) == 7
    for pointers in sets:
        for ptr, buf, n in zip(pointers, buffers, sizes, strict=True):
            assert ptr % SET_ALIGN == 0
            assert drv.bytes[ptr : ptr + n] == drv.bytes[buf : buf + n]
    assert sets[-1][-1] + sizes[-1] <= drv.next  # inside the allocation


def test_worker_settles_its_streams_before_every_timing(fake_pycuda):
    """Before each graph timing the worker launches the empty settling kernel SETTLE_LAUNCHES
    times on each stream a graph-capturing PyTorch process launches on: the legacy default
    stream, a side stream it keeps and its own graph stream (both non-blocking), after the
    candidate's checked run and before any timed run, so that it times in the state the
    benchmark and such a user run in; a second candidate is settled again, on the same
    streams, with the kernel loaded once."""
    import pycuda.driver as drv

    from measure import _worker
    from measure.launch_state import SETTLE_LAUNCHES

    worker = _worker.Worker(drv, drv.Device(0), FakeGraphs(drv))
    art, build = candidate("add")
    with LocalRunner(number=2, repeat=2, min_repeat_ms=0.0, rotate_inputs=False) as runner:
        request = runner._request(art, build.cubin, add_reference())
    assert worker.handle(request)["error_kind"] == 0
    settles = [p for p in drv.prepared if b"entry settle" in p[0]]
    assert len(settles) == 3 * SETTLE_LAUNCHES
    streams = [stream for _, stream, _ in settles]
    assert [streams.count(s) for s in (None, worker.side_stream, worker.stream)] == [
        SETTLE_LAUNCHES
    ] * 3
    assert worker.side_stream is not worker.stream
    assert {data.split(b"\n")[0] for data, _, _ in settles} == {b".version 7.8"}
    assert worker.stream.flags == worker.side_stream.flags == 1  # non-blocking, like PyTorch's
    assert {before for *_, before in settles} == {1}  # after the checked run only
    assert len(drv.launched) > 1
    request.pop("ref", None)
    settler = worker.settler
    assert worker.handle(request)["error_kind"] == 0
    assert worker.settler is settler
    settles = [p for p in drv.prepared if b"entry settle" in p[0]]
    assert len(settles) == 6 * SETTLE_LAUNCHES
    assert {stream for _, stream, _ in settles} == {None, worker.side_stream, worker.stream}


@pytest.mark.parametrize("sets", [1, 3])
def test_a_graph_probe_leads_in_with_the_spin_kernel(fake_pycuda, sets):
    """Each candidate's calibration probe is preceded by one spin of the lead-in kernel on the
    graph's stream, after the settling launches and before any timed run, and, when the timing
    rotates buffer sets, by a write of as many bytes as the rotation spans; the repeats lead
    in with a replay of their graph, so the probe's graph is replayed once and the repeats'
    graph once more than the repeats."""
    import pycuda.driver as drv

    from measure import _worker
    from measure.lead_in import LEAD_IN_NS

    graphs = FakeGraphs(drv)
    worker = _worker.Worker(drv, drv.Device(0), graphs)
    art, build = candidate("add")
    with LocalRunner(number=2, repeat=3, min_repeat_ms=0.0, rotate_inputs=False) as runner:
        request = runner._request(art, build.cubin, add_reference())
    rotate_bytes = sets * sum(a.nbytes for a in ARGS) if sets > 1 else 0
    request["rotate_bytes"] = rotate_bytes
    assert worker.handle(request)["error_kind"] == 0
    spins = [p for p in drv.prepared if b"entry spin" in p[0]]
    # after the checked run and the capture of the probe's runs (one per set, two at least)
    runs = max(2, sets)
    assert [(stream, before) for _, stream, before in spins] == [(worker.stream, 1 + runs)]
    assert drv.prepared.index(spins[0]) == len(drv.prepared) - 1  # after every settling launch
    assert worker.lead_in is not None and worker.lead_in.ns == LEAD_IN_NS
    expected_flush = [(rotate_bytes, worker.stream, len(drv.prepared) - 1)] if sets > 1 else []
    assert drv.flushed == expected_flush  # just before the spin
    # one graph for the probe and the repeats (the probe lasted min_repeat_ms: 0 ms); the
    # probe: one timed replay after the spin; the repeats: one lead-in replay and three timed
    assert graphs.captured == [runs] and graphs.replays == 1 + 1 + 3


def test_an_entry_compiled_apart_runs_from_its_own_cubin(fake_pycuda):
    """`BuildResult.entry_cubins` names the cubin of each entry function compiled apart: the
    worker launches that entry from it, not from `cubin` (whose kernel here adds wrongly)."""
    art, _ = candidate("add")
    apart = BuildResult(b"wrong", {}, entry_cubins={"k": b"add"})
    whole = BuildResult(b"wrong", {})
    with LocalRunner(number=1, repeat=1, timeout=20.0, rotate_inputs=False) as runner:
        results = runner.run([art, art], [apart, whole], {"add": add_reference()})
    assert [r.error_kind for r in results] == [
        MeasureErrorKind.NO_ERROR,
        MeasureErrorKind.WRONG_ANSWER,
    ], [r.error_msg for r in results]


def test_a_candidate_slower_than_the_bound_stops_with_the_readings_it_has(fake_pycuda):
    """`run(..., cost_bound=s)` reaches the worker: a candidate whose probe is slower than the
    bound (any is, against a bound of a picosecond) reports that one reading and says it stopped
    early, still checked first; without a bound the same candidate gets every repeat."""
    refs = {"add": add_reference()}
    arts, builds = zip(*(candidate(n) for n in ["add", "wrong", "add"]), strict=True)
    with LocalRunner(number=2, repeat=3, min_repeat_ms=0.0, rotate_inputs=False) as runner:
        bounded = runner.run(arts, builds, refs, cost_bound=1e-12)
        full = runner.run(arts[:1], builds[:1], refs)[0]
        assert runner.early_stops == 2
    assert [r.error_kind for r in bounded] == [
        MeasureErrorKind.NO_ERROR,
        MeasureErrorKind.WRONG_ANSWER,
        MeasureErrorKind.NO_ERROR,
    ]
    assert [len(r.costs) for r in bounded] == [1, 0, 1]
    assert [r.stopped_early for r in bounded] == [True, False, True]
    assert len(full.costs) == 3 and not full.stopped_early
    assert RunResult.from_dict(bounded[0].to_dict()) == bounded[0]
