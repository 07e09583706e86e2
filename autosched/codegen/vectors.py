"""Printing `vectorize` loops as vector accesses: one vector store to global or shared memory,
fed by vector loads, when `autosched.codegen.lanes` proves every access contiguous and aligned
in the loop's lane and every guard the same for all lanes.

Vector types come from `CUDATarget.vector_types`: float4/float2/double2 and half2/
__nv_bfloat162 have constructors and components; 4 or 8 halves are packed in a uint2/uint4
(8 or 16 bytes) whose lanes are read and written through a pointer cast. A half-precision load
under a Select whose condition is the same for every lane (a padded input) is read as a vector
when the condition, tested once into a `pred` temporary, holds; `cond ? load : 0` is then stored
as `pred ? vec : zero`. A copy into a double-buffered shared buffer is one asynchronous copy
instead (`autosched.codegen.async_copy`). A loop of reduction steps (every lane updates the
same accumulator) reads its loads as vectors and updates the accumulator lane by lane; a loop
storing into a local array (a thread-private cache of registers) reads them as vectors and
stores lane by lane, each lane a register of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from autosched.codegen.async_copy import async_copy_text
from autosched.codegen.context import PrintContext
from autosched.codegen.expr_printer import STREAMED_VECTORS
from autosched.codegen.lanes import guarded_loads, is_accumulation, lane_free_guard, vector_base
from autosched.codegen.streaming import store_line
from autosched.lower import ir
from autosched.te.dtype import HALF_DTYPES
from autosched.te.expr import Const, Expr, Load, Select

# dtypes whose loads under a Select (a padded input) are read as vectors: the half types, whose
# Tensor Core fetches would otherwise read 2 bytes at a time; float32 keeps its scalar reads
GUARDED_VECTOR_DTYPES = HALF_DTYPES


def lane_of(p: PrintContext, dtype: str, lanes: int, tmp: str, lane: int) -> str:
    """Lane `lane` of the vector temporary `tmp`: a component name, or (a packed vector with
    no components, e.g. 8 halves in a uint4) an element read through a pointer cast."""
    components = p.t.vector_types[(dtype, lanes)][2]
    if components:
        return f"{tmp}.{components[lane]}"
    return f"reinterpret_cast<const {p.t.types[dtype]}*>(&{tmp})[{lane}]"


def part_lanes(p: PrintContext, dtype: str, width: int) -> int | None:
    """The lanes of each vector a `width`-lane load of `dtype` is read as: `width` where the
    target has that vector, else the widest vector of `dtype` that divides it (8 float32, 32
    bytes, as two float4: an epilogue's accumulators for one 16-byte vector of halves); None
    where there is none."""
    if (dtype, width) in p.t.vector_types:
        return width
    parts = [n for d, n in p.t.vector_types if d == dtype and n > 1 and width % n == 0]
    return max(parts, default=None)


def lane_of_parts(p: PrintContext, dtype: str, width: int, temps: tuple[str, ...], lane: int):
    """Lane `lane` of a load read as the vector temporaries `temps` (`part_lanes` each)."""
    n = width // len(temps)
    return lane_of(p, dtype, n, temps[lane // n], lane % n)


def emit_vector_loop(p: PrintContext, s: ir.For, d: int) -> bool:
    """Print an aligned unit-stride `vectorize` loop as one vector store; False if it isn't."""
    body, guard, width = s.body, None, s.extent
    if isinstance(body, ir.IfThenElse) and body.else_case is None:
        guard = lane_free_guard(body.cond, s.var, width)
        body = body.then_case
        if guard is None:
            return False
    if isinstance(body, ir.Store) and (
        is_accumulation(body, s.var) or body.buffer.scope == "local"
    ):
        return _emit_lanes(p, s, body, guard, d)
    if not isinstance(body, ir.Store):
        return False
    copy = async_copy_text(p, body, s.var, width)
    vt = p.t.vector_types.get((body.buffer.dtype, width))
    store_base = (vt and vector_base(body.index, s.var, width)) if copy is None else None
    if copy is None and store_base is None:
        return False
    if guard is not None:
        p.emit(d, f"if ({p.ex(guard)}) {{")
    inner = d + (guard is not None)
    if copy is not None:
        p.emit(inner, copy)
    else:
        _emit_vector_store(p, inner, s, body, vt, store_base)
    if guard is not None:
        p.emit(d, "}")
    return True


def _emit_lanes(p: PrintContext, s: ir.For, store: ir.Store, guard: Expr | None, d: int) -> bool:
    """A `vectorize` loop over reduction steps (`acc = acc + f(lane)`), or one storing into a
    local array (registers, which have no vector type: a thread-private row cache): its loads
    read once as vectors (16 bytes per thread where the schedule asks for it), then one store
    per lane in lane order, so a sum is the one the serial loop makes. False (a plain loop)
    when no load can be read as a vector."""
    vloads = _vector_loads(p, store.value, s)
    if not vloads:
        return False
    ex = p.ex
    if guard is not None:
        p.emit(d, f"if ({ex(guard)}) {{")
    inner = d + (guard is not None)
    preds = _emit_preds(p, inner, s, [sel for _, _, sel in vloads.values() if sel is not None])
    temps = _emit_loads(p, inner, s.extent, vloads, preds)
    for lane in range(s.extent):
        ex.names[id(s.var)] = str(lane)
        for ld, _, sel in vloads.values():
            ex.names[id(ld)] = lane_of_parts(
                p, ld.buffer.dtype, s.extent, temps[(ld._key, id(sel))], lane
            )
        target = f"{ex.buffer_names[id(store.buffer)]}[{ex(store.index)}]"
        p.emit(inner, f"{target} = {ex(store.value)};")
        for ld, _, _ in vloads.values():
            ex.names.pop(id(ld), None)
    del ex.names[id(s.var)]
    for _, _, sel in vloads.values():
        if sel is not None:
            ex.names.pop(id(sel.cond), None)
    if guard is not None:
        p.emit(d, "}")
    return True


def _emit_vector_store(p: PrintContext, d: int, s: ir.For, body: ir.Store, vt, store_base) -> None:
    """The vectorize loop `s` storing `body` printed as one store of vector type `vt` at
    `store_base`: its loads read as vectors where they can, the lanes packed otherwise."""
    width = s.extent
    vloads = _vector_loads(p, body.value, s)
    ex = p.ex
    preds = _emit_preds(p, d, s, [sel for _, _, sel in vloads.values() if sel is not None])
    temps = _emit_loads(p, d, width, vloads, preds)
    at = f"{ex.buffer_names[id(body.buffer)]}[{ex(store_base)}]"

    def target(value: str) -> str:
        return store_line(p, body.buffer, at, value, vt[0])

    whole = _whole_vector(p, body, width, vloads, temps, preds)
    if whole is not None:
        p.emit(d, target(whole))
    else:
        lanes = []
        for lane in range(width):
            ex.names[id(s.var)] = str(lane)
            for ld, _, sel in vloads.values():
                tmp = temps[(ld._key, id(sel))]
                ex.names[id(ld)] = lane_of_parts(p, ld.buffer.dtype, width, tmp, lane)
            lanes.append(ex(body.value))
            for ld, _, _ in vloads.values():
                ex.names.pop(id(ld), None)
        del ex.names[id(s.var)]
        _emit_pack(p, d, body.buffer.dtype, width, target, lanes)
    for _, _, sel in vloads.values():
        if sel is not None:
            ex.names.pop(id(sel.cond), None)


def _vector_loads(p: PrintContext, value, s: ir.For) -> dict:
    """The loads of `value` read as vectors: id(load) -> (load, base index, guarding Select or
    None)."""
    out: dict = {}
    found = guarded_loads(value, s.var, s.extent)
    unguarded = {ld._key for ld, sel in found if sel is None}
    for ld, sel in found:
        if sel is not None and ld._key in unguarded:
            sel = None  # the same elements are read unguarded too: one vector serves both
        if sel is not None and ld.buffer.dtype not in GUARDED_VECTOR_DTYPES:
            continue
        if ld.buffer.scope != "local" and part_lanes(p, ld.buffer.dtype, s.extent):
            base = vector_base(ld.indices[0], s.var, s.extent)
            # a node met unguarded and under a Select is read unguarded (valid in both places)
            if base is not None and (id(ld) not in out or sel is None):
                out[id(ld)] = (ld, base, sel)
    return out


def _emit_loads(p: PrintContext, d: int, width: int, vloads: dict, preds: dict) -> dict:
    """The vector temporaries of each distinct (load, guard), one per part (`part_lanes`):
    `(load key, id(Select)) -> names`."""
    temps: dict[tuple, tuple[str, ...]] = {}
    for ld, base, sel in vloads.values():
        key = (ld._key, id(sel))
        if key in temps:
            continue
        n = part_lanes(p, ld.buffer.dtype, width)
        assert n is not None  # _vector_loads keeps only such loads
        ltype = p.t.vector_types[(ld.buffer.dtype, n)][0]
        names = []
        for part in range(width // n):
            names.append(tmp := p.fresh("vec"))
            index = f"{p.ex(base)} + {part * n}" if part else p.ex(base)
            at = f"{p.ex.buffer_names[id(ld.buffer)]}[{index}]"
            read = f"*reinterpret_cast<const {ltype}*>(&{at})"
            if id(ld.buffer) in p.ex.streamed and ltype in STREAMED_VECTORS:
                read = f"__ldcs(reinterpret_cast<const {ltype}*>(&{at}))"
            if sel is None:
                p.emit(d, f"{ltype} {tmp} = {read};")
            else:  # read only where the Select takes its true branch (all lanes agree)
                p.emit(d, f"{ltype} {tmp};")
                p.emit(d, f"if ({preds[id(sel)]}) {tmp} = {read};")
        temps[key] = tuple(names)
    return temps


# vector type -> its zero (0.0 of float16 and bfloat16 is all zero bits, as in a uint2/uint4)
ZERO_VECTOR = {
    "uint4": "make_uint4(0u, 0u, 0u, 0u)",
    "uint2": "make_uint2(0u, 0u)",
    "half2": "__float2half2_rn(0.0f)",
    "__nv_bfloat162": "__float2bfloat162_rn(0.0f)",
    "float4": "make_float4(0.0f, 0.0f, 0.0f, 0.0f)",
    "float2": "make_float2(0.0f, 0.0f)",
    "double2": "make_double2(0.0, 0.0)",
}


def _whole_vector(
    p: PrintContext, store: ir.Store, width: int, vloads: dict, temps: dict, preds: dict
) -> str | None:
    """The stored value as one vector expression when it is a vector-loaded copy (`vec`) or a
    padded copy `cond ? load : 0` whose load is read under `pred` (`pred ? vec : zero`); None
    when the lanes must be built one by one."""
    value, sel = store.value, None
    if isinstance(value, Select) and _is_plus_zero(value.f):
        value, sel = value.t, value
    entry = vloads.get(id(value))
    if entry is None or entry[2] is not sel:
        return None
    assert isinstance(value, Load)  # vloads holds loads only
    if value.buffer.dtype != store.buffer.dtype:
        return None
    (vec,) = temps[(value._key, id(sel))]  # the store's own vector type: one part
    if sel is None:
        return vec
    vtype = p.t.vector_types[(store.buffer.dtype, width)][0]
    zero = ZERO_VECTOR.get(vtype)
    return None if zero is None else f"({preds[id(sel)]} ? {vec} : {zero})"


def _is_plus_zero(e) -> bool:
    return isinstance(e, Const) and e.value == 0 and math.copysign(1.0, e.value) > 0


def _emit_preds(p: PrintContext, d: int, s: ir.For, selects: list[Select]) -> dict[int, str]:
    """One `bool pred = cond;` per guarding Select (its condition without the lane); the
    Select's condition prints as that name in every lane. id(Select) -> name."""
    preds: dict[int, str] = {}
    for sel in selects:
        if id(sel) not in preds:
            preds[id(sel)] = name = p.fresh("pred")
            guard = lane_free_guard(sel.cond, s.var, s.extent)
            assert guard is not None  # lanes.guarded_loads keeps only such Selects
            p.emit(d, f"bool {name} = {p.ex(guard)};")
            p.ex.names[id(sel.cond)] = name
    return preds


def _emit_pack(
    p: PrintContext, d: int, dtype: str, width: int, target: Callable[[str], str], lanes: list[str]
):
    """The store `target(vector)` of the vector of `lanes`: built by the constructor, or (a
    packed vector) in a temporary written lane by lane through a pointer cast."""
    vtype, ctor, _ = p.t.vector_types[(dtype, width)]
    if ctor:
        p.emit(d, target(f"{ctor}({', '.join(lanes)})"))
        return
    tmp = p.fresh("vec")
    p.emit(d, f"{vtype} {tmp};")
    for lane, value in enumerate(lanes):
        p.emit(d, f"reinterpret_cast<{p.t.types[dtype]}*>(&{tmp})[{lane}] = {value};")
    p.emit(d, target(tmp))


__all__ = ["emit_vector_loop", "lane_of"]
