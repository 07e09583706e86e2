"""Skip markers for tests that need a CUDA compiler (nvcc on PATH); shared by the test modules."""

from __future__ import annotations

import pytest

from measure import NvccNotFoundError, find_nvcc

try:
    find_nvcc()
    NVCC_MISSING = None
except NvccNotFoundError as exc:
    NVCC_MISSING = str(exc)
needs_nvcc = pytest.mark.skipif(NVCC_MISSING is not None, reason=f"{NVCC_MISSING}")
