"""Tests of measure's runner: CPU-only parts (framing, references, comparison, missing pycuda)
and, marked `gpu`, real kernels built with nvcc and run on a device."""

from __future__ import annotations

import importlib.util
import os
import time

import numpy as np
import pytest

from measure import (
    ArgSpec,
    GPUUnavailableError,
    HardwareParams,
    KernelArtifact,
    Launch,
    LocalBuilder,
    LocalMeasureContext,
    LocalRunner,
    MeasureErrorKind,
    Reference,
    compare_output,
    gpu_available,
    make_reference,
    pack,
    unpack,
)
from measure.framing import FdFrameReader, FrameEOF, FrameTimeout, read_frame, write_frame

# -- CPU-only -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "uint8", "bool"])
def test_pack_roundtrips_arrays(dtype):
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((3, 4, 5)) * 10).astype(dtype)
    obj = {"x": arr, "empty": np.zeros((0, 3), dtype), "nested": [arr[0], 1.5, "s", b"raw"]}
    back = unpack(pack(obj))
    assert back["x"].dtype == arr.dtype and back["x"].shape == arr.shape
    np.testing.assert_array_equal(back["x"], arr)
    assert back["empty"].shape == (0, 3)
    np.testing.assert_array_equal(back["nested"][0], arr[0])
    assert back["nested"][1:] == [1.5, "s", b"raw"]
    back["x"][...] = 0  # decoded arrays are writable copies


def test_frames_over_a_pipe_with_deadline():
    r, w = os.pipe()
    with os.fdopen(w, "wb") as out:
        big = np.arange(300_000, dtype=np.float64)  # larger than a pipe buffer chunk
        reader = FdFrameReader(r)
        with pytest.raises(FrameTimeout):
            reader.read(time.monotonic() + 0.05)
        import threading

        t = threading.Thread(target=lambda: (write_frame(out, {"a": big}), write_frame(out, 7)))
        t.start()
        got = reader.read(time.monotonic() + 10)
        np.testing.assert_array_equal(got["a"], big)
        assert reader.read(time.monotonic() + 10) == 7
        t.join()
    with pytest.raises(FrameEOF):
        reader.read(time.monotonic() + 10)
    os.close(r)
    r2, w2 = os.pipe()
    with os.fdopen(w2, "wb") as out:
        write_frame(out, {"k": [1, 2]})
    with os.fdopen(r2, "rb") as inp:
        assert read_frame(inp) == {"k": [1, 2]}


def test_make_reference_inputs_are_random_and_never_zero():
    args = (
        ArgSpec("x", (64, 32), "float32"),
        ArgSpec("h", (128,), "float16"),
        ArgSpec("i", (1,), "int32"),
        ArgSpec("u", (7,), "uint8"),
        ArgSpec("m", (16,), "bool"),
        ArgSpec("y", (64, 32), "float32", is_output=True),
    )
    for seed in range(20):
        ref = make_reference(args, lambda x, h, i, u, m: x * 2, seed=seed)
        for name, arr in ref.inputs.items():
            assert arr.dtype == np.dtype(next(a.dtype for a in args if a.name == name))
            assert np.any(arr), f"{name} is all zeros for seed {seed}"
        assert np.all(ref.inputs["u"] > 0)
        assert -1 <= ref.inputs["x"].min() and ref.inputs["x"].max() < 1
        np.testing.assert_array_equal(ref.outputs["y"], ref.inputs["x"] * 2)
    a = make_reference(args, lambda x, h, i, u, m: {"y": x}, seed=3)
    b = make_reference(args, lambda x, h, i, u, m: (x,), seed=3)
    np.testing.assert_array_equal(a.inputs["x"], b.inputs["x"])  # seeded
    assert (a.rtol, a.atol) == (1e-3, 1e-4)
    pos = make_reference(args, lambda x, h, i, u, m: np.log(x), ranges={"x": (0.5, 2.0)})
    assert pos.inputs["x"].min() >= 0.5
    with pytest.raises(ValueError, match="shape"):
        make_reference(args, lambda x, h, i, u, m: x[:1])


def test_compare_accepts_rounding_noise_and_flags_errors():
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 2048)).astype(np.float32)
    b = rng.uniform(-1, 1, (2048, 64)).astype(np.float32)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    # float32 accumulation in a different order than the float64 reference
    blocked = sum(a[:, k : k + 256] @ b[k : k + 256] for k in range(0, 2048, 256))
    assert compare_output("c", blocked.astype(np.float32), ref, 1e-3, 1e-4) is None
    wrong = ref.copy()
    wrong[5, 7] += 0.05 * np.sqrt(np.mean(ref**2))
    msg = compare_output("c", wrong, ref, 1e-3, 1e-4)
    assert msg and "1 of 4096" in msg and "out of tolerance" in msg
    unwritten = ref.copy()
    unwritten.view(np.uint32)[3, 3] = 0xFFFFFFFF  # the runner's poison pattern: NaN
    assert "NaN" in compare_output("c", unwritten, ref, 1e-3, 1e-4)
    assert "shape" in compare_output("c", ref[:1], ref, 1e-3, 1e-4)
    ints = np.arange(10, dtype=np.int32)
    assert compare_output("i", ints, ints, 0, 0) is None
    assert "1 of 10" in compare_output("i", ints + (ints == 4), ints, 0, 0)
    flags = np.array([True, False])
    poisoned = np.array([0xFF, 0], np.uint8).view(np.bool_)
    assert compare_output("m", poisoned, flags, 0, 0) is not None


def test_runner_without_pycuda_raises_clear_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pycuda" else real(name, *a)
    )
    with pytest.raises(GPUUnavailableError, match="pycuda is not installed.*GPU"):
        LocalRunner()
    with pytest.raises(GPUUnavailableError):
        LocalMeasureContext()


def test_gpu_available_gives_a_reason():
    ok, reason = gpu_available()
    assert isinstance(ok, bool) and isinstance(reason, str) and reason


# -- GPU ------------------------------------------------------------------------------------------

N = 1 << 20
VEC = (
    ArgSpec("a", (N,), "float32"),
    ArgSpec("b", (N,), "float32"),
    ArgSpec("c", (N,), "float32", is_output=True),
)
VADD = """
extern "C" __global__ void vadd(const float* a, const float* b, float* c) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  %s
}
"""
BODIES = {
    "good": f"if (i < {N}) c[i] = a[i] + b[i];",
    "wrong": f"if (i < {N}) c[i] = a[i] + b[i] + (i == 12345 ? 0.5f : 0.0f);",
    "unwritten": f"if (i < {N} - 1) c[i] = a[i] + b[i];",
    "oob": f"float* p = c + (1ll << 36); if (i < {N}) p[i] = a[i];",
    "hang": "volatile const float* v = a; while (v[0] == v[0]) { } c[i] = v[1];",
}
MM = 512
MATMUL = f"""
extern "C" __global__ void mm(const float* A, const float* B, float* C) {{
  int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < {MM}; ++k) acc += A[row * {MM} + k] * B[k * {MM} + col];
  C[row * {MM} + col] = acc;
}}
"""
MM_ARGS = (
    ArgSpec("A", (MM, MM), "float32"),
    ArgSpec("B", (MM, MM), "float32"),
    ArgSpec("C", (MM, MM), "float32", is_output=True),
)
# Two kernels in sequence through a scratch buffer, the second with 100 KB of dynamic shared memory.
TWO_STAGE = """
extern "C" __global__ void scale(const float* a, const float* b, float* tmp, float* c) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  tmp[i] = 2.0f * a[i];
}
extern "C" __global__ void add(const float* a, const float* b, float* tmp, float* c) {
  extern __shared__ float big[];  // 25600 floats
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  big[threadIdx.x * 100] = tmp[i] + b[i];
  __syncthreads();
  c[i] = big[threadIdx.x * 100];
}
"""


def vadd(kind: str) -> KernelArtifact:
    launch = Launch("vadd", (N // 256,), (256,))
    return KernelArtifact(VADD % BODIES[kind], (launch,), VEC, "vadd", kind)


@pytest.fixture(scope="module")
def builder():
    return LocalBuilder(n_parallel=16)


@pytest.fixture(scope="module")
def runner():
    with LocalRunner(timeout=4.0) as r:
        yield r


@pytest.fixture(scope="module")
def refs():
    return {
        "vadd": make_reference(VEC, lambda a, b: a + b, seed=0),
        "mm": make_reference(
            MM_ARGS, lambda A, B: A.astype(np.float64) @ B.astype(np.float64), seed=1
        ),
    }


def measure(builder, runner, arts, refs):
    builds = builder.build(arts)
    for art, build in zip(arts, builds, strict=True):
        assert build.ok, (art.tag, build.error_msg)
    return runner.run(arts, builds, refs)


@pytest.mark.gpu
def test_correct_kernels_are_timed(builder, runner, refs):
    arts = [
        vadd("good"),
        KernelArtifact(MATMUL, (Launch("mm", (32, 32), (16, 16)),), MM_ARGS, "mm"),
    ]
    for res in measure(builder, runner, arts, refs):
        assert res.error_kind == MeasureErrorKind.NO_ERROR, res.error_msg
        assert len(res.costs) == runner.repeat and all(0 < c < 1e-2 for c in res.costs)
    assert runner.device_name


@pytest.mark.gpu
def test_wrong_and_unwritten_outputs_are_wrong_answers(builder, runner, refs):
    wrong, unwritten = measure(builder, runner, [vadd("wrong"), vadd("unwritten")], refs)
    assert wrong.error_kind == MeasureErrorKind.WRONG_ANSWER and "1 of" in wrong.error_msg
    assert unwritten.error_kind == MeasureErrorKind.WRONG_ANSWER and "NaN" in unwritten.error_msg


@pytest.mark.gpu
def test_illegal_address_restarts_worker_and_next_kernel_measures(builder, runner, refs):
    starts = runner.worker_starts
    bad, good = measure(builder, runner, [vadd("oob"), vadd("good")], refs)
    assert bad.error_kind == MeasureErrorKind.RUNTIME_ERROR, bad.error_msg
    assert good.error_kind == MeasureErrorKind.NO_ERROR, good.error_msg
    assert runner.worker_starts == starts + 1


@pytest.mark.gpu
@pytest.mark.timeout(120)  # a runner that never kills the hang fails here, not in CI's limit
def test_infinite_loop_times_out_and_next_kernel_measures(builder, runner, refs):
    hang, good = measure(builder, runner, [vadd("hang"), vadd("good")], refs)
    assert hang.error_kind == MeasureErrorKind.RUN_TIMEOUT
    assert good.error_kind == MeasureErrorKind.NO_ERROR, good.error_msg


@pytest.mark.gpu
def test_measurements_repeat_within_5_percent(builder, runner, refs):
    art = KernelArtifact(MATMUL, (Launch("mm", (32, 32), (16, 16)),), MM_ARGS, "mm")
    first, second = measure(builder, runner, [art, art], refs)
    assert first.mean_cost > 30e-6, "the test needs a kernel of tens of microseconds"
    assert abs(first.mean_cost - second.mean_cost) / first.mean_cost < 0.05, (first, second)


@pytest.mark.gpu
def test_kernel_sequence_with_scratch_and_dynamic_shared_over_48k(refs):
    n = 256 * 64
    args = (
        ArgSpec("a", (n,), "float32"),
        ArgSpec("b", (n,), "float32"),
        ArgSpec("tmp", (n,), "float32"),  # neither input nor output: scratch
        ArgSpec("c", (n,), "float32", is_output=True),
    )
    launches = (Launch("scale", (64,), (256,)), Launch("add", (64,), (256,), 25600 * 4))
    ref = make_reference(args[:2] + args[3:], lambda a, b: 2 * a + b, seed=5)
    art = KernelArtifact(TWO_STAGE, launches, args, "two")
    with LocalMeasureContext(LocalBuilder(), LocalRunner(timeout=10.0)) as ctx:
        bad = KernelArtifact("this is not CUDA", launches, args, "two")
        good, failed = ctx.measure_batch([art, bad], {"two": ref})
    assert good.error_kind == MeasureErrorKind.NO_ERROR, good.error_msg
    assert good.resources["add"].shared_bytes == 0 and good.mean_cost < 1e-3
    assert failed.error_kind == MeasureErrorKind.COMPILE_ERROR and failed.run_seconds == 0.0


@pytest.mark.gpu
def test_hardware_params_from_device():
    hw = HardwareParams.from_device()
    assert hw.arch.startswith("sm_") and hw.num_sms > 0
    assert hw.max_shared_memory_per_block == 48 * 1024
    assert hw.max_shared_memory_per_block_optin >= hw.max_shared_memory_per_block
    assert (
        HardwareParams.from_device(max_local_memory_spill_bytes=64).max_local_memory_spill_bytes
        == 64
    )


def test_reference_type_is_plain_data():
    ref = Reference({"a": np.ones(3, np.float32)}, {"c": np.ones(3, np.float32)}, 1e-3, 1e-4)
    back = Reference.from_dict(unpack(pack(ref.to_dict())))
    np.testing.assert_array_equal(back.inputs["a"], ref.inputs["a"])
    assert (back.rtol, back.atol) == (1e-3, 1e-4)
