"""How CUDA spells things: `CUDATarget`, whose class attributes a variant target overrides
(kernel prefix, barrier, shared prefix, type names, math functions, vector types, loop
pragmas), and the half-precision conversions and arithmetic the printers share."""

from __future__ import annotations

import re
from typing import ClassVar

from autosched.lower import ir
from autosched.lower.fast_exp import FAST_EXP
from autosched.te.dtype import CUDA_TYPE, DTYPES, HALF_DTYPES
from measure.compile_options import ARCH_SPECIFIC_MARKER

_F32_MATH = {
    "exp": "expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})", "rsqrt": "rsqrtf({0})",
    "tanh": "tanhf({0})", "sigmoid": "(1.0f / (1.0f + expf(-({0}))))", "erf": "erff({0})",
    "abs": "fabsf({0})", "pow": "powf({0}, {1})", "floor": "floorf({0})", "ceil": "ceilf({0})",
}  # fmt: skip
# double: the same names without the trailing f (exp, fabs, floor, ...), double literals
_F64_MATH = {k: v.replace("f(", "(").replace("1.0f", "1.0") for k, v in _F32_MATH.items()}
# a kernel drawn with fast exponentials calls this in their place (lower/fast_exp.py)
_F32_DEVICE_MATH = {**_F32_MATH, FAST_EXP: "__expf({0})"}
_FAST_F32 = {
    "exp": "__expf({0})", "log": "__logf({0})", "pow": "__powf({0}, {1})",
    "sigmoid": "(1.0f / (1.0f + __expf(-({0}))))",
}  # fmt: skip

# lanes -> the CUDA type that holds that many 2-byte halves (8 or 16 bytes, as aligned)
PACKED = {4: "uint2", 8: "uint4"}
CUDA_HALF = tuple(d for d in DTYPES if d in HALF_DTYPES)  # ("float16", "bfloat16")

INFINITY_BITS = {
    "float32": "__int_as_float(0x7f800000)",
    "float64": "__longlong_as_double(0x7ff0000000000000LL)",
}


# half dtype -> (float to it, it to float)
HALF_CONVERT = {
    "float16": ("__float2half", "__half2float"),
    "bfloat16": ("__float2bfloat16", "__bfloat162float"),
}
HALF_ARITH = {"+": "__hadd_rn", "-": "__hsub_rn", "*": "__hmul_rn"}
# header -> pattern of the source text that needs it (a half value comes from a typed buffer,
# a literal or a cast, each of which names the type or its conversion)
HALF_HEADERS = {
    "#include <cuda_fp16.h>": re.compile(r"\bhalf2?\b|__float2half\b|__half2float\b"),
    "#include <cuda_bf16.h>": re.compile(r"bfloat16"),
}


class CUDATarget:
    """How CUDA spells things; a variant target overrides these attributes."""

    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    barrier = "__syncthreads();"
    shared_prefix = "__shared__ __align__(16)"
    dynamic_shared_decl = "extern __shared__ __align__({align}) unsigned char {name}[];"
    types: ClassVar[dict[str, str]] = CUDA_TYPE
    half_headers: ClassVar[dict[str, re.Pattern]] = HALF_HEADERS
    thread_index: ClassVar[dict[str, str]] = {tag: f"((int){tag})" for tag in ir.LAUNCH_TAGS}
    math: ClassVar[dict[str, dict[str, str]]] = {"float32": _F32_DEVICE_MATH, "float64": _F64_MATH}
    fast_math: ClassVar[dict[str, dict[str, str]]] = {"float32": _FAST_F32}
    minmax: ClassVar[dict[str, tuple[str, str]]] = {
        "float32": ("fminf", "fmaxf"),
        "float64": ("fmin", "fmax"),
    }
    # (dtype, lanes) -> (vector type, constructor, component names); a packed vector (4 or 8
    # halves in 8 or 16 bytes) has neither: its lanes are read and written through a pointer
    # cast (`autosched.codegen.vectors`)
    vector_types: ClassVar[dict[tuple[str, int], tuple[str, str, str]]] = {
        ("float32", 4): ("float4", "make_float4", "xyzw"),
        ("float32", 2): ("float2", "make_float2", "xy"),
        ("float16", 2): ("half2", "__halves2half2", "xy"),
        ("bfloat16", 2): ("__nv_bfloat162", "__halves2bfloat162", "xy"),
        ("float64", 2): ("double2", "make_double2", "xy"),
        **{(half, n): (packed, "", "") for half in CUDA_HALF for n, packed in PACKED.items()},
    }
    warp_size = 32
    # the line a source that uses arch-specific instructions (wgmma) begins with: the builder
    # then compiles it for the GPU's arch-specific target (`measure.compile_options`)
    arch_specific_marker = ARCH_SPECIFIC_MARKER
    # printed before a loop of each kind ("" prints nothing: nvcc decides for serial loops)
    loop_pragma: ClassVar[dict[str, str]] = {
        "unroll": "#pragma unroll",
        "vectorize": "#pragma unroll",
        "serial": "",
    }
