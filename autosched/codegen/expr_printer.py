"""CUDA text of te expressions (`ExprPrinter`), through a table from node type to text.

Half precision (float16 `half`, bfloat16 `__nv_bfloat16`) follows the rule stated in
`autosched.te.dtype`: `+ - *` print as `__hadd_rn`/`__hsub_rn`/`__hmul_rn` (rounded, never
contracted into an fma, so the CPU interpreter reproduces them exactly), division, min/max and
math functions go through float, and literals and casts through float32.
"""

from __future__ import annotations

import math

import numpy as np

from autosched.codegen.index_forms import is_nonneg, split_unrolled
from autosched.codegen.target import HALF_ARITH, HALF_CONVERT, INFINITY_BITS, CUDATarget
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.dispatch import TypeTable
from autosched.te.dtype import is_float, is_half
from autosched.te.expr import BinOp, Call, Cast, Const, Expr, IterVar, Load, Not, Select, Var

# Floor division and modulo for operands that may be negative (C's / and % truncate).
FLOOR_HELPERS = """\
#define AS_FLOOR_INT(T) \\
  __device__ __forceinline__ T as_floordiv(T a, T b) { \\
    T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; \\
  } \\
  __device__ __forceinline__ T as_floormod(T a, T b) { \\
    T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; \\
  }
AS_FLOOR_INT(int)
AS_FLOOR_INT(long long)
__device__ __forceinline__ float as_floordiv(float a, float b) { return floorf(a / b); }
__device__ __forceinline__ float as_floormod(float a, float b) { return a - floorf(a / b) * b; }
__device__ __forceinline__ double as_floordiv(double a, double b) { return floor(a / b); }
__device__ __forceinline__ double as_floormod(double a, double b) { return a - floor(a / b) * b; }
"""


def literal(c: Const) -> str:
    """A C literal for `c`; floats exact (9 significant digits for float, 17 for double)."""
    v, dtype = c.value, c.dtype
    if dtype == "bool":
        return "true" if v else "false"
    if not is_float(dtype):
        suffix, lowest = ("LL", -(1 << 63)) if dtype == "int64" else ("", -(1 << 31))
        text = f"(-{-lowest - 1}{suffix} - 1)" if v == lowest else f"{v}{suffix}"
    elif math.isnan(v):
        raise LoweringError(f"a NaN literal ({dtype}) cannot be printed as CUDA source")
    elif math.isinf(v):
        # bit patterns, not math.h's INFINITY: NVRTC compiles without the C headers
        text = INFINITY_BITS["float64" if dtype == "float64" else "float32"]
        text = text if v > 0 else f"(-{text})"
    else:
        # float/half: print the float32 value itself, so the C compiler does not round twice
        text = f"{v:.17e}" if dtype == "float64" else f"{float(np.float32(v)):.9e}f"
    if v < 0 and not text.startswith("("):
        text = f"({text})"
    return f"{HALF_CONVERT[dtype][0]}({text})" if is_half(dtype) else text


def _via_float(template: str, args: list[str], dtype: str) -> str:
    """A float function applied to half operands: convert in, compute in float, convert back."""
    to_half, to_float = HALF_CONVERT[dtype]
    return f"{to_half}({template.format(*(f'{to_float}({a})' for a in args))})"


# the element types whose scalar loads a streaming read prints as `__ldcs` (CUDA declares it
# for these without a header); other types read plainly
STREAMED_SCALARS = ("float32", "float64", "int32")
# the vector types `__ldcs` takes
STREAMED_VECTORS = ("float2", "float4", "double2", "int2", "int4", "uint2", "uint4")


class ExprPrinter:
    """Prints te expressions as CUDA; `names` maps id(Var) or id(Load) to replacement text."""

    def __init__(self, target: CUDATarget, buffer_names: dict[int, str], fast_math: bool):
        self.t = target
        self.buffer_names = buffer_names
        self.fast_math = fast_math
        self.names: dict[int, str] = {}
        self.helpers: set[str] = set()
        # ids of the buffers read with streaming loads (`Kernel.stream_reads`, streaming.py)
        self.streamed: set[int] = set()
        # ids of the buffers written with streaming stores (`Kernel.stream_writes`, streaming.py)
        self.stream_stored: set[int] = set()
        self.table: TypeTable[Expr, [], str] = TypeTable()
        self.table.register(Const, literal)
        self.table.register(Var, self._unbound)
        self.table.register(IterVar, self._unbound)
        self.table.register(BinOp, self._binop)
        self.table.register(Not, lambda e: f"(!{self(e.a)})")
        self.table.register(Select, lambda e: f"({self(e.cond)} ? {self(e.t)} : {self(e.f)})")
        self.table.register(Cast, self._cast)
        self.table.register(Call, self._call)
        self.table.register(Load, self._load)
        # the unrolled loops around what is being printed: their variables' ids -> extents
        self.unrolled: dict[int, int] = {}

    def __call__(self, e: Expr) -> str:
        name = self.names.get(id(e))
        if name is not None:
            return name
        fn = self.table.handler(e)
        if fn is None:
            raise LoweringError(f"the CUDA printer cannot print a {type(e).__name__}: {e!r}")
        return fn(e)

    def _unbound(self, e: Var) -> str:
        raise LoweringError(f"variable {e.name!r} is not bound in this kernel")

    def _binop(self, e: BinOp) -> str:
        a, b, dtype = self(e.a), self(e.b), e.a.dtype
        if e.op in ("min", "max"):
            return self.minmax(e.op, dtype, a, b)
        if e.op in ("floordiv", "floormod"):
            if not is_float(dtype) and is_nonneg(e.a) and is_nonneg(e.b):
                return f"({a} {'/' if e.op == 'floordiv' else '%'} {b})"
            self.helpers.add("floor")
            call = f"as_{e.op}({{0}}, {{1}})"
            return _via_float(call, [a, b], dtype) if is_half(dtype) else call.format(a, b)
        if is_half(dtype) and e.op in HALF_ARITH:
            return f"{HALF_ARITH[e.op]}({a}, {b})"
        if is_half(dtype) and e.op == "/":
            return _via_float("({0} / {1})", [a, b], dtype)
        return f"({a} {e.op} {b})"

    def minmax(self, op: str, dtype: str, a: str, b: str) -> str:
        """`min`/`max` of two printed operands of `dtype` (half through float)."""
        if is_half(dtype):
            fn = self.t.minmax["float32"][op == "max"]
            return _via_float(f"{fn}({{0}}, {{1}})", [a, b], dtype)
        fn = self.t.minmax[dtype][op == "max"] if dtype in self.t.minmax else op
        return f"{fn}({a}, {b})"

    def _cast(self, e: Cast) -> str:
        src, dst, x = e.value.dtype, e.dtype, self(e.value)
        if src == dst:
            return x
        if is_half(src):
            src, x = "float32", f"{HALF_CONVERT[src][1]}({x})"
        if is_half(dst):
            return f"{HALF_CONVERT[dst][0]}({x if src == 'float32' else f'((float){x})'})"
        return x if src == dst else f"(({self.t.types[dst]}){x})"

    def _call(self, e: Call) -> str:
        args = [self(a) for a in e.args]
        if not is_float(e.dtype):
            if e.func == "abs":
                return f"abs({args[0]})"
            raise LoweringError(f"math function {e.func} on {e.dtype} has no CUDA spelling")
        dtype = "float32" if is_half(e.dtype) else e.dtype
        fast = self.t.fast_math.get(dtype, {}) if self.fast_math else {}
        template = fast.get(e.func) or self.t.math[dtype].get(e.func)
        if template is None:
            raise LoweringError(f"unknown math function {e.func!r}")
        return _via_float(template, args, e.dtype) if is_half(e.dtype) else template.format(*args)

    def element(self, buffer: ir.Buffer, index: Expr) -> str:
        """Element `index` of `buffer`: `name[index]`, or inside long unrolled loops
        `(name + invariant)[offset]` where it splits so (`index_forms.split_unrolled`)."""
        name = self.buffer_names[id(buffer)]
        split = split_unrolled(index, buffer.scope, self.unrolled)
        if split is None:
            return f"{name}[{self(index)}]"
        invariant, offset = split
        return f"({name} + {self(invariant)})[{self(offset)}]"

    def _load(self, e: Load) -> str:
        (index,) = e.indices  # lowered loads take one flat index (the verifier checks)
        at = self.element(e.buffer, index)
        if id(e.buffer) in self.streamed and e.buffer.dtype in STREAMED_SCALARS:
            return f"__ldcs(&{at})"
        return at
