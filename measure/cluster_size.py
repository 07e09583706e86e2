"""Launching thread-block clusters above the portable size (Hopper, sm_90).

A kernel declares its cluster at compile time (`__cluster_dims__(C, 1, 1)`); 8 blocks is the
most every sm_90 part promises (the portable size). Hopper runs clusters of 16 blocks too, but
the driver launches such a kernel only after its function has been allowed non-portable
cluster sizes (`CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED` set to 1); without it the
launch fails. Every launcher (the runner's worker, `autosched.codegen.gpu_call`, the torch
runtime's `stream_launch`) calls one of the two functions below on each function it loads,
before its first launch: they set the attribute where the launch's `cluster_blocks` asks for
it and do nothing otherwise, so kernels without such clusters launch exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from measure.artifact import Launch

# the most blocks of a cluster every sm_90 part runs (autosched's `cluster_ir` reads it here)
PORTABLE_CLUSTER_BLOCKS = 8
# CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h's CUfunction_attribute)
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


def needs_non_portable_clusters(launch: Launch) -> bool:
    """Whether `launch`'s kernel runs in clusters of more than the portable 8 blocks."""
    return launch.cluster_blocks > PORTABLE_CLUSTER_BLOCKS


def allow_clusters_driver(set_attribute: Callable[[int, int], None], launch: Launch) -> None:
    """Allow `launch`'s function its non-portable clusters through the driver API, where it
    needs them: `set_attribute(attribute, value)` is `cuFuncSetAttribute` bound to it."""
    if needs_non_portable_clusters(launch):
        set_attribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)


def allow_clusters_pycuda(drv: Any, function: Any, launch: Launch) -> None:
    """Allow pycuda `function` (of `launch`) its non-portable clusters, where it needs them.
    pycuda's `function_attribute` enum names no cluster attribute, so the value is made from
    its number where the name is missing."""
    if not needs_non_portable_clusters(launch):
        return
    kinds = drv.function_attribute
    attribute = getattr(kinds, "NON_PORTABLE_CLUSTER_SIZE_ALLOWED", None)
    if attribute is None:
        attribute = kinds(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)
    function.set_attribute(attribute, 1)


__all__ = [
    "NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
    "PORTABLE_CLUSTER_BLOCKS",
    "allow_clusters_driver",
    "allow_clusters_pycuda",
    "needs_non_portable_clusters",
]
