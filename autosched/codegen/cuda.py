"""CUDA source from the lowered IR (`autosched.lower.ir.Program`).

`codegen_program` prints every kernel of a program into one source: `extern "C" __global__`
functions with `__launch_bounds__(threads, 1)` (one block per SM is enough: without the 1, ptxas
trades registers for occupancy and spills), `local` buffers as register arrays, `__shared__`
arrays, loops with `#pragma unroll`, float4/float2/half2/__nv_bfloat162 and packed 8- and
16-byte half accesses for aligned `vectorize` loops (`autosched.codegen.vectors`), a block
reduction for `AllReduce` (`autosched.codegen.allreduce`), nvcuda::wmma calls for the
warp-collective Tensor Core statements (`autosched.codegen.wmma`), and `cp.async` for copies
into double-buffered shared buffers (`autosched.codegen.async_copy`). Expressions and statements
are printed through tables from node type to text; the spellings that depend on the target are
class attributes of `CUDATarget`.

Shared memory: a kernel whose shared buffers fit in the 48 KB a block may declare statically
prints them as `__shared__` arrays. Above that, up to the device's opt-in limit, it declares one
`extern __shared__` byte array (its dynamic shared memory) and each buffer as a typed pointer
into it at an aligned offset (`shared_layout`: 16 bytes, 32 for wmma tiles), which indexes as
the array did; `dynamic_shared_bytes(kernel)` is the size its launch must ask for (`build`
puts it in the kernel's `Launch`).

Half precision (float16 `half`, bfloat16 `__nv_bfloat16`) follows the rule stated in
`autosched.te.dtype`: `+ - *` print as `__hadd_rn`/`__hsub_rn`/`__hmul_rn` (rounded, never
contracted into an fma, so the CPU interpreter reproduces them exactly), division, min/max and
math functions go through float, and literals and casts through float32. `cuda_fp16.h` /
`cuda_bf16.h` are included only by sources that use the type.

The printer prints the program it is given and rewrites nothing: the device program
(`autosched.lower.device_passes.device_program`) is what `build` hands it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from autosched.codegen.allreduce import emit_allreduce
from autosched.codegen.async_copy import HELPER as ASYNC_HELPER
from autosched.codegen.async_copy import HELPERS as ASYNC_HELPERS
from autosched.codegen.async_copy import WAIT as ASYNC_WAIT
from autosched.codegen.async_copy import async_copy_text, uses_async_copy
from autosched.codegen.lanes import aligned_unit_stride, linear_form
from autosched.codegen.vectors import emit_vector_loop
from autosched.codegen.wmma import HEADER as WMMA_HEADER
from autosched.codegen.wmma import (
    SHARED_ALIGN,
    WarpPrinter,
    uses_wmma,
    warp_memory,
    written_buffer,
)
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.te.dtype import BYTES, CUDA_TYPE, DTYPES, HALF_DTYPES, is_float, is_half
from autosched.te.expr import BinOp, Call, Cast, Const, Expr, IterVar, Load, Not, Select, Var
from measure.hardware import HardwareParams

# ---- small analyses ------------------------------------------------------------------------


def is_nonneg(e: Expr) -> bool:
    """True when `e` is provably >= 0 in a lowered kernel: loop and thread variables (all start
    at 0), non-negative literals, and +, *, floordiv, floormod, min, max, select of such."""
    if isinstance(e, (Const, Var)):
        return isinstance(e, Var) or e.value >= 0
    if isinstance(e, BinOp) and e.op in ("+", "*", "floordiv", "floormod", "min", "max"):
        both = is_nonneg(e.a), is_nonneg(e.b)
        return any(both) if e.op == "max" else all(both)
    return isinstance(e, Select) and is_nonneg(e.t) and is_nonneg(e.f)


# ---- shared memory -------------------------------------------------------------------------

# The most shared memory a block may declare statically; above it a kernel's shared buffers are
# placed in its dynamic shared memory, which the launch sizes (up to the opt-in limit).
STATIC_SHARED_LIMIT = HardwareParams().max_shared_memory_per_block
SHARED_ALIGN_BYTES = 16  # of every shared buffer: the widest vector access (uint4, float4)
DYNAMIC_SHARED_NAME = "as_dynamic_shared"


def shared_layout(kernel: ir.Kernel) -> tuple[dict[int, int], int, int]:
    """The kernel's shared buffers packed in allocation order: (byte offset by buffer id, the
    largest alignment, the total bytes). A buffer that warp statements access starts at a
    multiple of wmma's 32 bytes, every other one at a multiple of 16."""
    wmma = warp_memory(kernel)
    offsets, align, end = {}, SHARED_ALIGN_BYTES, 0
    for b in kernel.allocs:
        if b.scope != "shared":
            continue
        a = SHARED_ALIGN if id(b) in wmma else SHARED_ALIGN_BYTES
        offsets[id(b)] = end = -(-end // a) * a
        end += b.size * BYTES[b.dtype]
        align = max(align, a)
    return offsets, align, end


def dynamic_shared_bytes(kernel: ir.Kernel) -> int:
    """The dynamic shared memory the kernel's launch needs: 0 for a kernel whose shared buffers
    fit in `STATIC_SHARED_LIMIT` (printed as static arrays), else all of them, aligned."""
    total = shared_layout(kernel)[2]
    return total if total > STATIC_SHARED_LIMIT else 0


# ---- the target ----------------------------------------------------------------------------

_F32_MATH = {
    "exp": "expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})", "rsqrt": "rsqrtf({0})",
    "tanh": "tanhf({0})", "sigmoid": "(1.0f / (1.0f + expf(-({0}))))", "erf": "erff({0})",
    "abs": "fabsf({0})", "pow": "powf({0}, {1})", "floor": "floorf({0})", "ceil": "ceilf({0})",
}  # fmt: skip
# double: the same names without the trailing f (exp, fabs, floor, ...), double literals
_F64_MATH = {k: v.replace("f(", "(").replace("1.0f", "1.0") for k, v in _F32_MATH.items()}
_FAST_F32 = {
    "exp": "__expf({0})", "log": "__logf({0})", "pow": "__powf({0}, {1})",
    "sigmoid": "(1.0f / (1.0f + __expf(-({0}))))",
}  # fmt: skip

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
    math: ClassVar[dict[str, dict[str, str]]] = {"float32": _F32_MATH, "float64": _F64_MATH}
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
    # printed before a loop of each kind ("" prints nothing: nvcc decides for serial loops)
    loop_pragma: ClassVar[dict[str, str]] = {
        "unroll": "#pragma unroll",
        "vectorize": "#pragma unroll",
        "serial": "",
    }


# ---- expressions ---------------------------------------------------------------------------


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


class ExprPrinter:
    """Prints te expressions as CUDA; `names` maps id(Var) or id(Load) to replacement text."""

    def __init__(self, target: CUDATarget, buffer_names: dict[int, str], fast_math: bool):
        self.t = target
        self.buffer_names = buffer_names
        self.fast_math = fast_math
        self.names: dict[int, str] = {}
        self.helpers: set[str] = set()
        self.table: dict[type, Callable[[Expr], str]] = {
            Const: literal,
            Var: self._unbound,
            IterVar: self._unbound,
            BinOp: self._binop,
            Not: lambda e: f"(!{self(e.a)})",
            Select: lambda e: f"({self(e.cond)} ? {self(e.t)} : {self(e.f)})",
            Cast: self._cast,
            Call: self._call,
            Load: self._load,
        }

    def __call__(self, e: Expr) -> str:
        name = self.names.get(id(e))
        if name is not None:
            return name
        fn = self.table.get(type(e))
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

    def _load(self, e: Load) -> str:
        (index,) = e.indices  # lowered loads take one flat index (the verifier checks)
        return f"{self.buffer_names[id(e.buffer)]}[{self(index)}]"


# ---- statements ----------------------------------------------------------------------------


class KernelPrinter:
    """Prints one kernel; statements through a table, expressions through an ExprPrinter."""

    def __init__(self, kernel: ir.Kernel, params: list[ir.Buffer], target: CUDATarget, fast: bool):
        self.k, self.params, self.t = kernel, params, target
        self.lines: list[str] = []
        self.used: set[str] = set()
        buffer_names = {id(b): self.fresh(b.name) for b in [*params, *kernel.allocs]}
        self.ex = ExprPrinter(target, buffer_names, fast)
        wide = any(b.size >= 1 << 31 for b in [*params, *kernel.allocs])
        self.index_type = "long long" if wide else "int"
        for tag, var in ir.THREAD_VARS.items():
            text = target.thread_index[tag]
            self.ex.names[id(var)] = text.replace("(int)", "(long long)") if wide else text
        self.table: dict[type, Callable] = {
            ir.Seq: lambda s, d: [self.stmt(c, d) for c in s.stmts],
            ir.Store: self._store,
            ir.For: self._for,
            ir.IfThenElse: self._if,
            ir.Barrier: self._barrier,
            ir.AllReduce: lambda s, d: emit_allreduce(self, s, d),
        }
        self.warp = WarpPrinter(self)
        self.table.update(self.warp.table())

    def fresh(self, name: str) -> str:
        """A C identifier from `name`, unique in this kernel (`i`, `i_1`, ...)."""
        base = name = re.sub(r"\W|^(?=\d)|^$", "_", name)
        for n in itertools.count(1):
            if name not in self.used:
                break
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def stmt(self, s: ir.Stmt, depth: int) -> None:
        fn = self.table.get(type(s))
        if fn is None:
            raise LoweringError(f"the CUDA printer cannot print a {type(s).__name__} statement")
        fn(s, depth)

    def print(self) -> str:
        k, t = self.k, self.t
        written = {
            id(s.buffer) for s in ir.iter_stmts(k.body) if isinstance(s, (ir.Store, ir.AllReduce))
        }
        written |= {id(b) for b in map(written_buffer, ir.iter_stmts(k.body)) if b is not None}
        args = []
        for b in self.params:
            const = "" if id(b) in written else "const "
            args.append(f"{const}{t.types[b.dtype]}* {t.restrict} {self.ex.buffer_names[id(b)]}")
        self.emit(0, f"{t.kernel_prefix} __launch_bounds__({k.threads_per_block}, 1) {k.name}(")
        self.lines[-1] += ", ".join(args) + ") {"
        dynamic = self.dynamic_shared()
        for b in k.allocs:
            prefix = f"{t.shared_prefix} " if b.scope == "shared" else ""
            line = dynamic.get(id(b)) or self.warp.alloc_line(b)
            self.emit(
                1, line or f"{prefix}{t.types[b.dtype]} {self.ex.buffer_names[id(b)]}[{b.size}];"
            )
        self.stmt(k.body, 1)
        self.emit(0, "}")
        return "\n".join(self.lines)

    def dynamic_shared(self) -> dict[int, str]:
        """Over `STATIC_SHARED_LIMIT`, declare the kernel's dynamic shared memory and return
        each shared buffer's declaration (by id): a typed pointer at its offset, which indexes
        as the array would. Empty (static arrays) for a kernel at or under the limit."""
        if not dynamic_shared_bytes(self.k):
            return {}
        offsets, align, _ = shared_layout(self.k)
        base = self.fresh(DYNAMIC_SHARED_NAME)
        self.emit(1, self.t.dynamic_shared_decl.format(align=align, name=base))
        lines = {}
        for b in self.k.allocs:
            if id(b) in offsets:
                ty, name = self.t.types[b.dtype], self.ex.buffer_names[id(b)]
                cast = f"({ty}*)({base} + {offsets[id(b)]})"
                lines[id(b)] = f"{ty}* {self.t.restrict} {name} = {cast};"
        return lines

    def _store(self, s: ir.Store, d: int) -> None:
        copy = async_copy_text(self, s)
        if copy is not None:
            self.emit(d, copy)
            return
        name = self.ex.buffer_names[id(s.buffer)]
        self.emit(d, f"{name}[{self.ex(s.index)}] = {self.ex(s.value)};")

    def _barrier(self, s: ir.Barrier, d: int) -> None:
        """`__syncthreads()`, after waiting for the thread's asynchronous copies if it may have
        issued any (they must be complete and visible once the block passes the barrier)."""
        if uses_async_copy(self.k):
            self.ex.helpers.add(ASYNC_HELPER)
            self.emit(d, ASYNC_WAIT)
        self.emit(d, self.t.barrier)

    def _if(self, s: ir.IfThenElse, d: int) -> None:
        self.emit(d, f"if ({self.ex(s.cond)}) {{")
        self.stmt(s.then_case, d + 1)
        if s.else_case is not None:
            self.emit(d, "} else {")
            self.stmt(s.else_case, d + 1)
        self.emit(d, "}")

    def _for(self, s: ir.For, d: int) -> None:
        if s.kind == "vectorize" and emit_vector_loop(self, s, d):
            return
        name = self.ex.names[id(s.var)] = self.fresh(s.var.name)
        pragma = self.t.loop_pragma.get(s.kind, "")
        if pragma:
            self.emit(d, pragma)
        self.emit(d, f"for ({self.index_type} {name} = 0; {name} < {s.extent}; ++{name}) {{")
        self.stmt(s.body, d + 1)
        self.emit(d, "}")


# ---- the program ---------------------------------------------------------------------------


def codegen_program(
    program: ir.Program, fast_math: bool = False, target: CUDATarget | None = None
) -> str:
    """One CUDA source holding every kernel of `program` (kernels take all params in order)."""
    target = target or CUDATarget()
    bodies, helpers = [], set()
    for kernel in program.kernels:
        printer = KernelPrinter(kernel, program.params, target, fast_math)
        bodies.append(printer.print())
        helpers |= printer.ex.helpers
    head = ["// Generated by autosched.codegen.cuda"]
    head += [h for h, used in target.half_headers.items() if any(used.search(b) for b in bodies)]
    if any(uses_wmma(k) for k in program.kernels):
        head.append(WMMA_HEADER)
    if "floor" in helpers:
        head.append(FLOOR_HELPERS.rstrip("\n"))
    if ASYNC_HELPER in helpers:
        head.append(ASYNC_HELPERS.rstrip("\n"))
    return "\n".join(head) + "\n\n" + "\n\n".join(bodies) + "\n"


__all__ = ["CUDATarget", "aligned_unit_stride", "codegen_program", "is_nonneg", "linear_form"]
