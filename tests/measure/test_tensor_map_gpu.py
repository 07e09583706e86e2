"""Tensor maps end to end through the runner (`measure._worker`), marked `gpu`: a hand-written
kernel copies boxes of its input through a TMA copy described by a tensor map parameter, and the
runner, which encodes the map for each buffer set it launches with and passes it after the
pointers, must see the output match numpy, out-of-bounds elements zero, with and without the
128-byte swizzle (which the kernel undoes as the interpreter defines it:
`lower/interpret_tma.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from measure import (
    ArgSpec,
    KernelArtifact,
    Launch,
    LocalBuilder,
    LocalMeasureContext,
    LocalRunner,
    MeasureErrorKind,
    make_reference,
)
from measure.artifact import TensorMapSpec

ROWS, COLS = 100, 88  # the input: not a whole number of 32 x 32 boxes (zero fill)
BOX = 32  # rows and columns of a box: 128-byte float32 rows
GRID = (-(-COLS // BOX), -(-ROWS // BOX))
OUT = (GRID[1] * BOX, GRID[0] * BOX)

SOURCE = r"""
struct __align__(64) TensorMap { unsigned long long bits[16]; };

extern "C" __global__ void __launch_bounds__(128)
tile_copy(const float* __restrict__ x, float* __restrict__ y,
          const __grid_constant__ TensorMap x_map) {
  __shared__ __align__(1024) float tile[BOX * BOX];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned bar_at = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(bar_at) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int row0 = blockIdx.y * BOX, col0 = blockIdx.x * BOX;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(bar_at), "r"(BOX * BOX * 4) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3}], [%4];\n"
        :: "r"((unsigned)__cvta_generic_to_shared(tile)),
           "l"(reinterpret_cast<unsigned long long>(&x_map)), "r"(col0), "r"(row0), "r"(bar_at)
        : "memory");
  }
  asm volatile("{\n.reg .pred done;\nTILE_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
               "@!done bra TILE_WAIT;\n}\n" :: "r"(bar_at) : "memory");
  for (int i = threadIdx.x; i < BOX * BOX; i += blockDim.x) {
    const int r = i / BOX, c = i % BOX;
    int at = r * 128 + c * 4;  // the box row-major in bytes
    if (SWIZZLED) at ^= ((at >> 7) & 7) << 4;  // 16-byte piece j of row r at j ^ (r % 8)
    y[(row0 + r) * OUT_COLS + col0 + c] = tile[at / 4];
  }
}
"""


def tile_copy_source(swizzle: str) -> str:
    """The kernel's CUDA for a map of `swizzle`."""
    defines = {"BOX": BOX, "OUT_COLS": OUT[1], "SWIZZLED": int(swizzle == "128B")}
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    return head + SOURCE


def artifact(swizzle: str) -> KernelArtifact:
    args = (ArgSpec("x", (ROWS, COLS), "float32"), ArgSpec("y", OUT, "float32", is_output=True))
    x_map = TensorMapSpec("x", (COLS, ROWS), (COLS * 4,), (BOX, BOX), swizzle)
    launch = Launch("tile_copy", GRID, (128,), 0, (x_map,))
    return KernelArtifact(tile_copy_source(swizzle), (launch,), args, "copy")


def padded(x: np.ndarray) -> np.ndarray:
    out = np.zeros(OUT, np.float32)
    out[:ROWS, :COLS] = x
    return out


@pytest.mark.gpu
def test_the_runner_passes_encoded_tensor_maps_and_the_copies_land_as_numpy_says():
    arts = [artifact("none"), artifact("128B")]
    assert all(a.validate() is None for a in arts)
    ref = make_reference(arts[0].args, padded, seed=3)
    with LocalMeasureContext(LocalBuilder(), LocalRunner(timeout=20.0)) as ctx:
        results = ctx.measure_batch(arts, {"copy": ref})
    for r in results:
        assert r.error_kind == MeasureErrorKind.NO_ERROR, r.error_msg
