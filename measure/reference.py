"""Reference data that checks a candidate's outputs, and the comparison itself.

Tolerances (`Reference.rtol`, `Reference.atol`) are scale-free. For floating outputs an element
passes when

    |out - ref| <= atol * rms(ref) + rtol * |ref|

where `rms(ref)` is the root-mean-square of the whole reference tensor, so `atol` is in units of
the tensor's typical magnitude (a reduction over K terms of O(1) inputs has outputs of O(sqrt(K));
a fixed absolute tolerance would be wrong for one shape or another). Defaults per dtype:

    float64: rtol 1e-7, atol 1e-9;  float32: rtol 1e-3, atol 1e-4;  float16: rtol 1e-2, atol 1e-2;
    bfloat16: rtol 2e-2, atol 2e-2

widened for a reduction over K terms accumulated in the output dtype (`default_tolerance`): with
u the unit roundoff of the output dtype (2^-11 float16, 2^-8 bfloat16, 2^-24 float32), the
reference is the float64 result of the same (already rounded) inputs rounded once, so a correct
kernel differs by its own final rounding (at most 1 ulp = 2u relative; rtol >= 4u) plus the error
of accumulating in the output dtype: K roundings of at most u x |partial sum|, partial sums of
O(rms), a random walk of about u * sqrt(K/3) * rms; atol >= 6 u sqrt(K) (about 10 standard
deviations, so that no element of a large tensor fails by chance). Inputs rounded to float16 /
bfloat16 cost nothing here: the reference is computed from the rounded values themselves. A
float16 / bfloat16 matmul accumulating in float32 (`out_dtype="float32"`) keeps the float32
tolerance.

A kernel allowed to use TF32 Tensor Cores rounds its float32 matrix operands to a 10-bit mantissa
(as float16's) before products summed in float32; the reference keeps exact float32 inputs, so the
rounding of the inputs is the error: a random walk over the K products, about
u_tf32 * sqrt(2/3) * rms(ref) (u_tf32 = 2^-11) whatever K is. The "tf32" entry of
DEFAULT_TOLERANCES (float16's: atol 1e-2 is about 25 standard deviations) is what
`default_tolerance([out dtype, "tf32"])` gives such a task.

float32 accumulation in a different order than numpy's gives errors near sqrt(K) * 6e-8 * rms
(about 4e-6 rms for K = 4096), well inside 1e-4; a missing term, a wrong index or an unwritten
element is off by O(rms) and fails. NaN or Inf where the reference is finite always fails: outputs
are poisoned with NaN (0xFF bytes) before the checked run, so an element a kernel never writes is
caught. Integer and bool outputs must match exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from measure import bfloat16
from measure.artifact import ArgSpec

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-3, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    # float32 values rounded to TF32 (10-bit mantissa) before float32 sums: see the docstring
    "tf32": (1e-2, 1e-2),
}
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}


@dataclasses.dataclass(frozen=True, eq=False)
class Reference:
    """Inputs to upload and the outputs expected, by argument name, with the tolerances."""

    inputs: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    rtol: float = 1e-3
    atol: float = 1e-4
    # outputs stored as bfloat16 bit patterns (uint16), compared as the values they encode
    bfloat16_outputs: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain dict holding numpy arrays (serialise it with `measure.framing.pack`)."""
        return {
            "inputs": dict(self.inputs),
            "outputs": dict(self.outputs),
            "rtol": self.rtol,
            "atol": self.atol,
            "bfloat16_outputs": list(self.bfloat16_outputs),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Reference:
        """Inverse of `to_dict`."""
        return cls(
            dict(data["inputs"]),
            dict(data["outputs"]),
            data["rtol"],
            data["atol"],
            tuple(data.get("bfloat16_outputs", ())),
        )


def default_tolerance(dtypes: Sequence[str], reduction_length: int = 1) -> tuple[float, float]:
    """(rtol, atol) for outputs of these dtypes, each computed by accumulating
    `reduction_length` terms in its own dtype: the loosest over the dtypes of the per-dtype
    default and the rounding bound of the module docstring."""
    rtol, atol = 0.0, 0.0
    for dtype in dtypes:
        name = dtype if dtype in DEFAULT_TOLERANCES else bfloat16.dtype_name(dtype)
        r, a = DEFAULT_TOLERANCES.get(name, (0.0, 0.0))
        u = UNIT_ROUNDOFF.get(name)
        if u is not None:
            r, a = max(r, 4 * u), max(a, 6 * u * math.sqrt(max(1, reduction_length)))
        rtol, atol = max(rtol, r), max(atol, a)
    return rtol, atol


def random_array(
    shape: tuple[int, ...], dtype: str, rng: np.random.Generator, low=None, high=None
) -> np.ndarray:
    """Seeded random data that is never all zeros.

    Floats: uniform in [low, high) (default [-1, 1)); signed ints: [-8, 8); unsigned: [1, 16);
    bool: fair coin. A tensor that would come out all zeros gets a 1 in its first element.
    bfloat16: the float data rounded, as uint16 bit patterns (`measure.bfloat16`).
    """
    if dtype == bfloat16.NAME:
        return bfloat16.to_bits(random_array(shape, "float32", rng, low, high))
    dt = np.dtype(dtype)
    if dt.kind == "f":
        lo, hi = (-1.0, 1.0) if low is None else (low, high)
        arr = rng.uniform(lo, hi, size=shape).astype(dt)
    elif dt.kind == "i":
        lo, hi = (-8, 8) if low is None else (low, high)
        arr = rng.integers(lo, hi, size=shape).astype(dt)
    elif dt.kind == "u":
        lo, hi = (1, 16) if low is None else (low, high)
        arr = rng.integers(lo, hi, size=shape).astype(dt)
    elif dt.kind == "b":
        arr = rng.integers(0, 2, size=shape).astype(dt)
    else:
        raise ValueError(f"cannot make random data of dtype {dt.name}")
    if arr.size and not np.any(arr):
        arr.flat[0] = 1
    return arr


def make_reference(
    args: Sequence[ArgSpec],
    fn: Callable[..., object],
    seed: int = 0,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    reduction_length: int = 1,
) -> Reference:
    """Build a `Reference`: seeded random inputs, and outputs computed by `fn(**inputs)`.

        `fn` receives every non-output argument by name and returns a dict name -> array, a tuple in
        output order, or a single array when there is one output. `ranges` overrides the value range
        of named inputs (e.g. `{"x": (0.1, 2.0)}` for a log or sqrt). Tolerances default from the
        output dtypes and `reduction_length`, the number of terms an output element sums in its own
    dtype (see the module docstring). Compute the reference in float64 where it matters. A
    bfloat16 output may be returned as float values (rounded here) or as uint16 bit patterns.
    """
    rng = np.random.default_rng(seed)
    ranges = dict(ranges or {})
    inputs = {}
    for arg in args:
        if not arg.is_output:
            low, high = ranges.get(arg.name, (None, None))
            inputs[arg.name] = random_array(arg.shape, arg.dtype, rng, low, high)
    out_specs = [a for a in args if a.is_output]
    if not out_specs:
        raise ValueError("make_reference: no argument is marked is_output")
    produced = fn(**{k: v.copy() for k, v in inputs.items()})
    if isinstance(produced, Mapping):
        missing = [a.name for a in out_specs if a.name not in produced]
        if missing:
            raise ValueError(f"make_reference: fn returned no value for outputs {missing}")
        values = [produced[a.name] for a in out_specs]
    else:
        values = list(produced) if isinstance(produced, (tuple, list)) else [produced]
        if len(values) != len(out_specs):
            raise ValueError(
                f"make_reference: fn returned {len(values)} arrays for {len(out_specs)} outputs"
            )
    outputs = {}
    for spec, value in zip(out_specs, values, strict=True):
        arr = np.asarray(value)
        if arr.shape != spec.shape:
            raise ValueError(
                f"make_reference: output {spec.name!r} has shape {arr.shape}, expected {spec.shape}"
            )
        if spec.dtype == bfloat16.NAME and arr.dtype != bfloat16.STORAGE:
            arr = bfloat16.to_bits(arr)
        outputs[spec.name] = np.ascontiguousarray(arr.astype(bfloat16.storage_dtype(spec.dtype)))
    d_rtol, d_atol = default_tolerance([a.dtype for a in out_specs], reduction_length)
    return Reference(
        inputs,
        outputs,
        d_rtol if rtol is None else rtol,
        d_atol if atol is None else atol,
        tuple(a.name for a in out_specs if a.dtype == bfloat16.NAME),
    )


def compare_output(
    name: str, out: np.ndarray, ref: np.ndarray, rtol: float, atol: float
) -> str | None:
    """Return None if `out` matches `ref` within tolerance, else a message saying how it differs."""
    if out.shape != ref.shape:
        return f"{name}: shape {out.shape} != expected {ref.shape}"
    if ref.dtype.kind == "b":
        out, ref = out.view(np.uint8), ref.view(np.uint8)  # a poison byte 0xFF is not True
    if ref.dtype.kind != "f":
        bad = out != ref
        if not bad.any():
            return None
        i = int(np.flatnonzero(bad.ravel())[0])
        return (
            f"{name}: {int(bad.sum())} of {ref.size} elements differ; first at flat index {i}: "
            f"got {out.ravel()[i]!r}, expected {ref.ravel()[i]!r}"
        )
    o = out.astype(np.float64).ravel()
    r = ref.astype(np.float64).ravel()
    finite = np.isfinite(r)
    nonfinite_bad = ~np.isfinite(o) & finite
    same_special = ~finite & ((o == r) | (np.isnan(o) & np.isnan(r)))
    if nonfinite_bad.any():
        i = int(np.flatnonzero(nonfinite_bad)[0])
        return (
            f"{name}: {int(nonfinite_bad.sum())} of {r.size} elements are NaN/Inf (never written, "
            f"or overflow); first at flat index {i}: got {o[i]}, expected {r[i]}"
        )
    if (~finite & ~same_special).any():
        i = int(np.flatnonzero(~finite & ~same_special)[0])
        return f"{name}: expected {r[i]} at flat index {i}, got {o[i]}"
    o, r = o[finite], r[finite]
    if r.size == 0:
        return None
    rms = math.sqrt(float(np.mean(r * r)))
    scale = rms if rms > 0 else 1.0
    err = np.abs(o - r)
    allowed = atol * scale + rtol * np.abs(r)
    rel_norm = float(np.linalg.norm(o - r) / max(np.linalg.norm(r), 1e-300))
    if np.all(err <= allowed):
        return None
    i = int(np.argmax(err - allowed))
    return (
        f"{name}: {int((err > allowed).sum())} of {r.size} elements out of tolerance; "
        f"max abs error {float(err.max()):.3g} (ref rms {rms:.3g}), relative norm error "
        f"{rel_norm:.3g}; worst at finite index {i}: got {o[i]:.6g}, expected {r[i]:.6g} "
        f"(rtol {rtol:g}, atol {atol:g} x rms)"
    )


def allowed_error(ref: np.ndarray, rtol: float, atol: float) -> np.ndarray | None:
    """Per-element error bound of `compare_output` for a float reference with only finite values
    (in the reference's dtype, shrunk by a relative 1e-5 so that rounding in that dtype never
    passes what the float64 check would fail); None when there is no such fast bound."""
    if ref.dtype.kind != "f" or ref.size == 0 or not np.isfinite(ref).all():
        return None
    r = ref.astype(np.float64)
    rms = math.sqrt(float(np.mean(r * r)))
    allowed = (atol * (rms if rms > 0 else 1.0) + rtol * np.abs(r)) * (1 - 1e-5)
    return allowed.astype(ref.dtype)


def compare_outputs(
    outputs: Mapping[str, np.ndarray], reference: Reference, bounds: dict | None = None
) -> str | None:
    """Compare every expected output; None when all pass, else the first message. `bounds`, a
    dict kept by the caller per reference, caches `allowed_error` so that a correct candidate
    costs one pass in the output's dtype (the float64 comparison runs only to explain a failure)."""
    for name, expected in reference.outputs.items():
        if name not in outputs:
            return f"{name}: the candidate produced no such output"
        out = outputs[name]
        if name in reference.bfloat16_outputs:
            out, expected = bfloat16.from_bits(out), bfloat16.from_bits(expected)
        if bounds is not None:
            if name not in bounds:
                bounds[name] = allowed_error(expected, reference.rtol, reference.atol)
            allowed = bounds[name]
            if allowed is not None and out.shape == expected.shape and out.dtype == expected.dtype:
                with np.errstate(all="ignore"):
                    if np.all(np.abs(out - expected) <= allowed):  # NaN compares False
                        continue
        message = compare_output(name, out, expected, reference.rtol, reference.atol)
        if message:
            return message
    return None
