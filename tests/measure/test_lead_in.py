"""The probes' lead-in (measure.lead_in): the spin kernel's PTX (ptxas accepts it:
tests/measure/test_launch_state.py) and the flush's scratch buffer, grown only when a larger one
is asked."""

from __future__ import annotations

import pytest

from measure.lead_in import LEAD_IN_NS, MAX_SPIN_READS, LeadIn, spin_kernel_ptx


def test_the_spin_reads_the_global_timer_and_ends_after_a_bounded_number_of_reads():
    ptx = spin_kernel_ptx((9, 0))
    assert ".target sm_90\n" in ptx and ".entry spin(.param .u64 spin_ns)" in ptx
    assert "%globaltimer" in ptx and f", {MAX_SPIN_READS}, " in ptx
    with pytest.raises(ValueError, match=r"no PTX target known for compute capability \(6, 1\)"):
        spin_kernel_ptx((6, 1))


class Device:
    def compute_capability(self):
        return (9, 0)


class Driver:
    """Loads any PTX; logs allocations, frees, memsets and launches in `log`."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        driver = self

        class Buffer:
            def __init__(self, n: int) -> None:
                self.n = n

            def __int__(self) -> int:
                return 4096

            def free(self) -> None:
                driver.log.append(("free", self.n))

        class Function:
            def prepare(self, types):
                assert types == "Q"

            def prepared_async_call(self, grid, block, stream, ns):
                driver.log.append(("spin", stream, ns))

        class Module:
            def get_function(self, name):
                assert name == "spin"
                return Function()

        self.Buffer, self.Module = Buffer, Module

    def module_from_buffer(self, data):
        assert b".entry spin" in data and data.endswith(b"\0")
        return self.Module()

    def mem_alloc(self, n):
        self.log.append(("alloc", n))
        return self.Buffer(n)

    def memset_d32_async(self, ptr, value, words, stream):
        self.log.append(("memset", 4 * words, stream))


def test_a_flush_grows_its_scratch_only_for_a_larger_span_then_spins():
    drv = Driver()
    lead_in = LeadIn(drv, Device())
    assert lead_in.error is None
    lead_in.launch("s", 0)
    lead_in.launch("s", 99)  # rounded up to whole 32-bit words
    lead_in.launch("s", 64)
    lead_in.launch("s", 200)
    spin = ("spin", "s", LEAD_IN_NS)
    assert drv.log == [
        spin,
        ("alloc", 100),
        ("memset", 100, "s"),
        spin,
        ("memset", 64, "s"),
        spin,
        ("free", 100),
        ("alloc", 200),
        ("memset", 200, "s"),
        spin,
    ]


def test_a_driver_that_refuses_the_ptx_leaves_no_spin_and_says_why():
    class Refusing:
        @staticmethod
        def module_from_buffer(data):
            raise RuntimeError("cuModuleLoadDataEx failed: PTX JIT compiler library not found")

    lead_in = LeadIn(Refusing, Device())
    assert lead_in.function is None
    assert lead_in.error == (
        "RuntimeError: cuModuleLoadDataEx failed: PTX JIT compiler library not found"
    )
