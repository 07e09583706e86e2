"""On the GPU (sm_90): TMA im2col copies of convolutions' gathered inputs (`lower/tma_im2col.py`,
`SketchParams.tma_im2col`) against numpy, built and launched as the search's kernels are (the
im2col tensor maps encoded by `cuTensorMapEncodeIm2col` in `gpu_call`): sampled window-fused
3x3 states (padding 1, strides 1 and 2), a strided 1x1 and 3x3 states of 256 channels to 128 at
14x14 (the seed conv's geometry at batch 4).
Run with `pytest -m gpu tests/gpu/test_gpu_tma_im2col.py`.
"""

from __future__ import annotations

import pytest

from tests.gpu.test_gpu_kernels import run_on_gpu
from tests.lower.test_tma_fetch import conv_1x1_state
from tests.lower.test_tma_im2col import FAST, conv, sampled_conv, sampled_tma, with_tiles

pytestmark = pytest.mark.gpu


def im2col_maps(kernel) -> list:
    return [m for launch in kernel.launches for m in launch.tensor_maps if m.im2col]


@pytest.mark.parametrize("stride", [1, 2])
def test_gpu_sampled_3x3_im2col_states_match_numpy(stride):
    dag, _, state = sampled_conv(stride)
    kernel = run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
    (data,) = im2col_maps(kernel)
    assert data.arg == "data" and data.traversal_strides == (stride, stride)


def test_gpu_a_strided_1x1_im2col_state_matches_numpy():
    dag, state = conv_1x1_state(stride=2)
    kernel = run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
    assert im2col_maps(kernel)


def test_gpu_seed_geometry_3x3_im2col_states_match_numpy():
    """Two sampled states (their M tiles span image rows and images; the last tile runs past
    the pixels) of a 3x3 conv of 256 channels to 128 over 4 images of 14x14."""
    dag = conv(14, 256, 3, 1, 1, batch=4, out=128)
    _, states = sampled_tma(dag, range(32), count=2)
    for state in states:
        kernel = run_on_gpu(dag, state, rtol=2e-2, atol=2e-2)
        assert im2col_maps(kernel)


@pytest.mark.parametrize("warps, cols, slots", FAST)
def test_gpu_the_fast_configurations_of_the_seed_geometry_match_numpy(warps, cols, slots):
    """128 x 256 over 3 slots and 128 x 128 over 4 (two warpgroups, TMA im2col A tiles) on a
    3x3 conv of 256 channels to 256 over 4 images of 14x14: 784 pixels, so tiles cross image
    rows and images and the last runs past the pixels."""
    dag = conv(14, 256, 3, 1, 1, batch=4, out=256)
    state = with_tiles(dag, ((warps, 1, 16), (1, cols, 16), (4, 16)), slots)
    kernel = run_on_gpu(dag, state, rtol=2e-2, atol=2e-2)
    assert im2col_maps(kernel)
