"""Clusters above the portable size (measure/cluster_size.py): a launch carries its kernel's
cluster size, and the launchers' helpers allow a non-portable size on exactly the functions
whose launch needs it (no GPU: the attribute calls are recorded)."""

from __future__ import annotations

import enum
import types

import pytest

from measure.artifact import Launch
from measure.cluster_size import (
    NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
    allow_clusters_driver,
    allow_clusters_pycuda,
    needs_non_portable_clusters,
)


def test_a_launch_keeps_its_cluster_size_through_its_record():
    launch = Launch("k", (256,), (512,), cluster_blocks=16)
    assert Launch.from_dict(launch.to_dict()) == launch
    plain = Launch("k", (256,), (512,))
    assert "cluster_blocks" not in plain.to_dict()  # records of other kernels read as before
    assert Launch.from_dict(plain.to_dict()).cluster_blocks == 1


@pytest.mark.parametrize(("blocks", "needed"), [(1, False), (8, False), (16, True)])
def test_only_clusters_above_8_blocks_are_allowed_first(blocks, needed):
    launch = Launch("k", (16 * 4,), (256,), cluster_blocks=blocks)
    assert needs_non_portable_clusters(launch) == needed
    calls: list[tuple[int, int]] = []
    allow_clusters_driver(lambda attribute, value: calls.append((attribute, value)), launch)
    assert calls == ([(NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)] if needed else [])


class _Attribute(enum.IntEnum):
    """pycuda's function_attribute as it is: no cluster attribute named."""

    MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    NON_PORTABLE = NON_PORTABLE_CLUSTER_SIZE_ALLOWED  # the value exists, under no known name


class _Function:
    def __init__(self) -> None:
        self.attributes: dict[int, int] = {}

    def set_attribute(self, attribute, value: int) -> None:
        assert isinstance(attribute, _Attribute)
        self.attributes[int(attribute)] = value


def test_pycuda_functions_get_the_attribute_by_number():
    drv = types.SimpleNamespace(function_attribute=_Attribute)
    big, small = _Function(), _Function()
    allow_clusters_pycuda(drv, big, Launch("k", (32,), (128,), cluster_blocks=16))
    allow_clusters_pycuda(drv, small, Launch("k", (32,), (128,), cluster_blocks=8))
    assert big.attributes == {NON_PORTABLE_CLUSTER_SIZE_ALLOWED: 1}
    assert small.attributes == {}
