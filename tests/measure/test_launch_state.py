"""The empty settling kernel's PTX (measure.launch_state): a target the device runs, in a PTX
ISA version that knows it, accepted by ptxas where the CUDA toolkit is installed (CI has it)."""

from __future__ import annotations

import os
import subprocess

import pytest

from measure.errors import NvccNotFoundError
from measure.launch_state import PTX_ISA_OF_TARGET, LaunchSettler, empty_kernel_ptx
from measure.lead_in import spin_kernel_ptx
from measure.ptxas import find_nvcc


@pytest.mark.parametrize(
    "capability, target, version",
    [((9, 0), 90, "7.8"), ((8, 6), 86, "7.1"), ((8, 7), 86, "7.1"), ((12, 1), 120, "8.7")],
)
def test_ptx_names_the_newest_target_not_above_the_device(capability, target, version):
    ptx = empty_kernel_ptx(capability)
    assert f".target sm_{target}\n" in ptx and f".version {version}\n" in ptx
    assert ".entry settle()" in ptx


def test_a_device_older_than_every_target_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"no PTX target known for compute capability \(6, 1\)"):
        empty_kernel_ptx((6, 1))


def _ptxas() -> str | None:
    """ptxas beside the nvcc measure finds (PATH, $CUDA_HOME, /usr/local/cuda), or None."""
    try:
        path = os.path.join(os.path.dirname(find_nvcc()), "ptxas")
    except NvccNotFoundError:
        return None
    return path if os.access(path, os.X_OK) else None


@pytest.mark.skipif(_ptxas() is None, reason="no CUDA toolkit (ptxas)")
@pytest.mark.parametrize("kernel_ptx", [empty_kernel_ptx, spin_kernel_ptx])
@pytest.mark.parametrize("target", [t for t in PTX_ISA_OF_TARGET if t >= 75])
def test_ptxas_accepts_the_ptx(tmp_path, target, kernel_ptx):
    """The settling kernel and the probes' spin (measure.lead_in) on every target from sm_75."""
    path = tmp_path / "kernel.ptx"
    path.write_text(kernel_ptx((target // 10, target % 10)))
    done = subprocess.run(
        [str(_ptxas()), f"-arch=sm_{target}", str(path), "-o", str(tmp_path / "kernel.cubin")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_a_driver_that_cannot_load_it_is_reported_not_raised():
    class Refusing:
        @staticmethod
        def module_from_buffer(data):
            raise RuntimeError("cuModuleLoadDataEx failed: PTX JIT compiler library not found")

    class Device:
        def compute_capability(self):
            return (9, 0)

    why = LaunchSettler(Refusing, Device()).settle([None])
    assert why == "RuntimeError: cuModuleLoadDataEx failed: PTX JIT compiler library not found"


def test_a_failed_launch_is_reported_not_raised():
    class Function:
        def prepare(self, types):
            pass

        def prepared_async_call(self, grid, block, stream):
            raise RuntimeError("cuLaunchKernel failed: too many resources requested")

    class Module:
        def get_function(self, name):
            assert name == "settle"
            return Function()

    class Driver:
        @staticmethod
        def module_from_buffer(data):
            assert b".entry settle" in data
            return Module()

    class Device:
        def compute_capability(self):
            return (9, 0)

    settler = LaunchSettler(Driver, Device())
    assert settler.error is None
    why = settler.settle([None])
    assert why == "RuntimeError: cuLaunchKernel failed: too many resources requested"
