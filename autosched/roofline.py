"""A kernel's place on the roofline: achieved bandwidth against the GPU's measured copy peak, and
FLOP rate against its arithmetic peak, from the task's DAG and a measured time.

    peak = peak_for("NVIDIA H200")                      # the table's row, or the default's
    line = Roofline.of(dag, seconds, peak).line()       # "312 GB/s = 7% of 4200 GB/s; ..."

Bytes are the least any kernel must move: each input read once and each output written once
(`dag_bytes`). Peaks are per GPU in `PEAKS`, keyed by a word of the device name; bandwidth is
the measured device-to-device copy rate (not the data sheet's), FLOP rates the data sheet's.
Any of them can be overridden (`peak_for(..., bandwidth=..., fp32=...)`, `autosched show
--peak-bandwidth`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.te.dtype import BYTES
from autosched.te.tensor import PlaceholderOp


@dataclass(frozen=True)
class Peak:
    """What one GPU can do: bytes/s of memory bandwidth, FLOP/s on CUDA cores (fp32) and on
    Tensor Cores (fp16 / bf16, dense)."""

    name: str
    bandwidth: float
    fp32: float
    tensor_core: float


# device-name word -> peaks. Bandwidth: a measured copy (H100 SXM 3.0 TB/s, H200 4.2 TB/s);
# FLOP rates: the SXM data sheets (fp32 67 TFLOP/s, fp16 Tensor Cores 989 TFLOP/s dense)
PEAKS: dict[str, Peak] = {
    "H100": Peak("H100", 3.0e12, 67e12, 989e12),
    "H200": Peak("H200", 4.2e12, 67e12, 989e12),
}
DEFAULT_GPU = "H100"


def peak_for(device: str | None = None, **overrides: float | None) -> Peak:
    """The peaks of the GPU whose name contains a key of `PEAKS` (H200 before H100 is not an
    issue: no name holds both), else the default GPU's; keyword `overrides` (bandwidth, fp32,
    tensor_core) replace the table's values."""
    upper = (device or "").upper()
    peak = next((p for key, p in PEAKS.items() if key in upper), PEAKS[DEFAULT_GPU])
    unknown = set(overrides) - {"bandwidth", "fp32", "tensor_core"}
    if unknown:
        raise ValueError(
            f"peak_for: unknown peaks {sorted(unknown)} (bandwidth, fp32, tensor_core)"
        )
    given = {k: v for k, v in overrides.items() if v is not None}
    return Peak(
        peak.name,
        given.get("bandwidth", peak.bandwidth),
        given.get("fp32", peak.fp32),
        given.get("tensor_core", peak.tensor_core),
    )


def dag_bytes(dag) -> int:
    """Bytes a kernel of `dag` must move at least: every input read once, every output written
    once (intermediate stages and re-reads are the schedule's cost, not the task's)."""
    total = 0
    for t in dag.tensors:
        if isinstance(t.op, PlaceholderOp) or any(t.op is op for op in dag.outputs):
            n = 1
            for extent in t.shape:
                n *= extent
            total += n * BYTES.get(t.dtype, 4)
    return total


@dataclass(frozen=True)
class Roofline:
    """One kernel's achieved rates against a GPU's peaks."""

    seconds: float
    nbytes: int
    flop: float
    peak: Peak
    tensor_core: bool = False

    @classmethod
    def of(cls, dag, seconds: float, peak: Peak, tensor_core: bool = False) -> Roofline:
        return cls(seconds, dag_bytes(dag), dag.flop_count, peak, tensor_core)

    @property
    def bandwidth(self) -> float:
        return self.nbytes / self.seconds

    @property
    def flop_rate(self) -> float:
        return self.flop / self.seconds

    @property
    def flop_peak(self) -> float:
        return self.peak.tensor_core if self.tensor_core else self.peak.fp32

    @property
    def memory_bound(self) -> bool:
        """True when the task's FLOP per byte is below the ridge point (peak FLOP rate over
        peak bandwidth): at best it runs at the bandwidth, not the FLOP rate."""
        return self.flop * self.peak.bandwidth < self.flop_peak * self.nbytes

    @property
    def bandwidth_fraction(self) -> float:
        return self.bandwidth / self.peak.bandwidth

    @property
    def flop_fraction(self) -> float:
        return self.flop_rate / self.flop_peak

    def line(self) -> str:
        """`roofline (H200, memory-bound): 3012 GB/s = 72% of 4200 GB/s; 0.75 TFLOP/s = 1%
        of fp32 67 TFLOP/s`."""
        unit = "fp16 Tensor Core" if self.tensor_core else "fp32"
        bound = "memory-bound" if self.memory_bound else "compute-bound"
        return (
            f"roofline ({self.peak.name}, {bound}): {self.bandwidth / 1e9:.0f} GB/s = "
            f"{self.bandwidth_fraction:.0%} of {self.peak.bandwidth / 1e9:.0f} GB/s; "
            f"{self.flop_rate / 1e12:.2f} TFLOP/s = {self.flop_fraction:.0%} of {unit} "
            f"{self.flop_peak / 1e12:.0f} TFLOP/s"
        )


__all__ = ["DEFAULT_GPU", "PEAKS", "Peak", "Roofline", "dag_bytes", "peak_for"]
