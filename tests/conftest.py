"""Shared pytest configuration: the `gpu` marker skips cleanly where no CUDA device is usable."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    """Return why GPU tests cannot run here, or None when pycuda sees a device."""
    try:
        import pycuda.driver as drv  # noqa: F401
    except Exception as exc:  # ImportError, or a driver library that fails to load
        return f"pycuda is not importable ({type(exc).__name__}: {exc})"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "pycuda found no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device ({exc})"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True, scope="session")
def _verify_every_lowering():
    """Every program `lower` or `device_program` returns in the tests goes through the IR
    verifier."""
    from autosched.lower.verify import verify_every_lowering

    previous = verify_every_lowering(True)
    yield
    verify_every_lowering(previous)
