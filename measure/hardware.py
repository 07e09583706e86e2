"""Hardware limits that decide whether a kernel can be launched at all."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


@dataclasses.dataclass(frozen=True)
class HardwareParams:
    """Per-device limits used by the builder's resource checks (and by autosched's search).

    The defaults describe an NVIDIA H100/H200 (compute capability 9.0).

    `max_shared_memory_per_block` is the limit without opt-in (static plus dynamic shared memory);
    a kernel may go up to `max_shared_memory_per_block_optin` only through *dynamic* shared memory,
    for which the runner sets `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    `max_local_memory_spill_bytes` bounds ptxas's spill stores plus spill loads: 0 rejects any
    spill (a spilling candidate is almost always slow, so the search loses little); raise it to
    keep spilling candidates.
    """

    num_sms: int = 132
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048  # resident threads of one SM (all its blocks)
    max_blocks_per_sm: int = 32  # resident blocks of one SM
    max_shared_memory_per_sm: int = 228 * 1024  # shared memory of one SM (all its blocks)
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_shared_memory_per_block: int = 48 * 1024
    max_shared_memory_per_block_optin: int = 227 * 1024
    max_registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    register_allocation_unit: int = 256  # registers are allocated per warp in units of this many
    warp_allocation_granularity: int = 4  # a block's warps take registers in groups of this many
    max_vthread_extent: int = 8
    max_local_memory_spill_bytes: int = 0
    arch: str = "sm_90"

    def to_dict(self) -> dict:
        """Return a plain dict (msgpack/JSON-serialisable)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> HardwareParams:
        """Inverse of `to_dict`; unknown keys are an error, missing keys take the defaults."""
        kwargs: dict[str, Any] = {}
        names = {f.name for f in dataclasses.fields(cls)}
        for key, value in data.items():
            if key not in names:
                raise ValueError(f"unknown HardwareParams field {key!r}")
            kwargs[key] = tuple(value) if isinstance(value, list) else value
        return cls(**kwargs)

    @classmethod
    def from_device(cls, device: int = 0, **overrides) -> HardwareParams:
        """Query CUDA device `device` through pycuda; fall back to the defaults without one.

        This initialises the CUDA driver in the calling process (no context is created).
        Keyword `overrides` replace queried values (e.g. `max_local_memory_spill_bytes`).
        """
        queried = _query_device(device)
        queried.update(overrides)
        return cls(**queried)

    def registers_per_thread_limit(self, threads_per_block: int) -> int:
        """The most registers per thread ptxas gives a kernel declared
        `__launch_bounds__(threads_per_block, 1)`: the register file over the block's warps
        rounded up to the warp allocation granularity, rounded down to the allocation unit.
        Checked against ptxas (sm_90, CUDA 13.0) for every multiple of 32 threads: e.g. 448
        threads get 128 registers, not 65536 / 448 = 146."""
        warps = -(-threads_per_block // self.warp_size)
        warps = -(-warps // self.warp_allocation_granularity) * self.warp_allocation_granularity
        per_thread = self.max_registers_per_block // (warps * self.warp_size)
        granule = max(1, self.register_allocation_unit // self.warp_size)
        return min(self.max_registers_per_thread, per_thread // granule * granule)

    def registers_needed(self, registers_per_thread: int, threads_per_block: int) -> int:
        """Registers a block takes from the register file, with the per-warp allocation unit."""
        warps = -(-threads_per_block // self.warp_size)
        unit = self.register_allocation_unit
        per_warp = -(-registers_per_thread * self.warp_size // unit) * unit
        return per_warp * warps


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def _query_device(device: int) -> dict:
    try:
        import pycuda.driver as drv
    except Exception:  # pycuda missing or its driver library fails to load
        return {}
    try:
        drv.init()
        dev = drv.Device(device)
        attrs = dev.get_attributes()
    except Exception:
        return {}
    a = drv.device_attribute

    def get(name: str, default):
        key = getattr(a, name, None)
        return int(attrs[key]) if key is not None and key in attrs else default

    base = HardwareParams()
    major, minor = dev.compute_capability()
    return {
        "num_sms": get("MULTIPROCESSOR_COUNT", base.num_sms),
        "warp_size": get("WARP_SIZE", base.warp_size),
        "max_threads_per_block": get("MAX_THREADS_PER_BLOCK", base.max_threads_per_block),
        "max_block_dims": (
            get("MAX_BLOCK_DIM_X", base.max_block_dims[0]),
            get("MAX_BLOCK_DIM_Y", base.max_block_dims[1]),
            get("MAX_BLOCK_DIM_Z", base.max_block_dims[2]),
        ),
        "max_grid_dims": (
            get("MAX_GRID_DIM_X", base.max_grid_dims[0]),
            get("MAX_GRID_DIM_Y", base.max_grid_dims[1]),
            get("MAX_GRID_DIM_Z", base.max_grid_dims[2]),
        ),
        "max_shared_memory_per_block": get(
            "MAX_SHARED_MEMORY_PER_BLOCK", base.max_shared_memory_per_block
        ),
        "max_shared_memory_per_block_optin": get(
            "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", base.max_shared_memory_per_block_optin
        ),
        "max_registers_per_block": get("MAX_REGISTERS_PER_BLOCK", base.max_registers_per_block),
        "max_threads_per_sm": get("MAX_THREADS_PER_MULTIPROCESSOR", base.max_threads_per_sm),
        "max_blocks_per_sm": get("MAX_BLOCKS_PER_MULTIPROCESSOR", base.max_blocks_per_sm),
        "max_shared_memory_per_sm": get(
            "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", base.max_shared_memory_per_sm
        ),
        "arch": f"sm_{major}{minor}",
    }


@functools.lru_cache(maxsize=8)
def device_arch(device: int = 0) -> str | None:
    """Return `sm_XY` of CUDA device `device` as pycuda sees it, or None without pycuda/device."""
    try:
        import pycuda.driver as drv

        drv.init()
        major, minor = drv.Device(device).compute_capability()
    except Exception:
        return None
    return f"sm_{major}{minor}"
