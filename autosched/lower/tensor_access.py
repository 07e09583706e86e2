"""Reading one access of a tensorized nest (`autosched.lower.tensorize`): per-dimension
indices relative to the buffer, their origins and strides in the tensorized loop variables, and
what those make of it: the tile number of a fragment access, or the `MatrixTile` (offset, ldm,
layout) of a global / shared one. Everything here raises LoweringError for an access that is not
a whole, aligned tile."""

from __future__ import annotations

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.arith import is_multiple, to_affine
from autosched.lower.bound_inference import root_value_map
from autosched.lower.ir import I32, int32
from autosched.lower.mma_plan import Access
from autosched.lower.plan import LoweringPlan
from autosched.te.dtype import DTYPES
from autosched.te.expr import BinOp, Expr, Load, Var
from autosched.te.visitor import free_vars, substitute

# ("float16", "bfloat16", "float32"): float32 operand fragments hold TF32 values
OPERAND_DTYPES = tuple(d for d in DTYPES if d in ir.WMMA_K)


def own_access(plan: LoweringPlan, i: int) -> Access:
    """The element stage i writes."""
    inf = plan.info[i]
    dims = [inf.value[a.name] for a in plan.compute_op(i).axis]
    return Access(inf.buf, dims, plan.flat_index(i, dims, relative=False), i)


def load_access(plan: LoweringPlan, i: int, node: Load) -> Access:
    """The element a tensor load of stage i's body reads."""
    root_map = root_value_map(plan, i)
    j = plan.producer_stage[id(node.buffer.op)]
    idx = [substitute(x, root_map) for x in node.indices]
    relative = not plan.stages[j].is_placeholder
    dims = idx
    if relative and plan.info[j].base:
        dims = [BinOp("-", x, b, I32) for x, b in zip(idx, plan.info[j].base, strict=True)]
    return Access(plan.info[j].buf, dims, plan.flat_index(j, idx, relative), j)


def coefficients(e: Expr, tvars: list[Var], bounds, what: str) -> list[int]:
    """The coefficients of `tvars` in `e`, which must be affine in them."""
    aff = to_affine(e, bounds)
    ids = {id(v) for v in tvars}
    out = dict.fromkeys(ids, 0)
    for coeff, atom in aff.terms.values():
        if id(atom) in ids:
            out[id(atom)] = coeff
        elif any(id(v) in ids for v in free_vars(atom)):
            raise LoweringError(f"tensorize: {what} is not affine in the tensorized loops: {e!r}")
    return [out[id(v)] for v in tvars]


def at_origin(e: Expr, tvars: list[Var]) -> Expr:
    return substitute(e, {v: int32(0) for v in tvars})


def var_dim(acc: Access, v: Var, bounds, what: str) -> int:
    """The one dimension of a fragment access that `v` indexes (with coefficient 1)."""
    found = []
    for d, e in enumerate(acc.dims):
        (coeff,) = coefficients(e, [v], bounds, what)
        if coeff:
            found.append((d, coeff))
    if len(found) != 1 or found[0][1] != 1:
        raise LoweringError(
            f"tensorize: {what} must index one dimension of {acc.buffer.name} by "
            f"{v.name} (coefficient 1), got {found}"
        )
    return found[0][0]


def fragment_shape(b: ir.Buffer) -> tuple[int, int]:
    """`ir.tile_shape(b)`, or LoweringError for a fragment of a dtype no wmma shape takes."""
    if b.scope in ir.OPERAND_SCOPES and b.dtype not in OPERAND_DTYPES:
        raise LoweringError(
            f"tensorize: {b.name} ({b.scope}) has dtype {b.dtype}; matrix fragments hold "
            f"{OPERAND_DTYPES}"
        )
    return ir.tile_shape(b)


def tile_number(acc: Access, tdims: tuple[int, int], tvars: list[Var], bounds, what) -> Expr:
    """The tile of fragment `acc.buffer` an access starts: origins of the tiled (row, column)
    dimensions in steps of the tile's rows and columns, tiles numbered over the dimensions in
    order."""
    shape = acc.buffer.shape
    steps = dict(zip(tdims, fragment_shape(acc.buffer), strict=True))
    for d, step in steps.items():
        if shape[d] % step:
            raise LoweringError(
                f"tensorize: fragment {acc.buffer.name} has extent {shape[d]} in a tiled "
                f"dimension; it must be a multiple of {step}"
            )
    tile: Expr = int32(0)
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        origin = at_origin(acc.dims[d], tvars)
        if d in steps:
            if not is_multiple(origin, steps[d], bounds):
                raise LoweringError(
                    f"tensorize: {what} starts at {origin!r} in dimension {d} of "
                    f"{acc.buffer.name}, not a multiple of {steps[d]}"
                )
            origin = BinOp("floordiv", origin, int32(steps[d]), I32)
        tile = BinOp("+", tile, BinOp("*", origin, int32(stride), I32), I32)
        stride *= shape[d] // steps[d] if d in steps else shape[d]
    return tile


def fragment_tile(acc: Access, dims: tuple[int, int], tvars, bounds, what) -> Expr:
    """Tile number of a fragment access tiled over its planned (row, column) dimensions `dims`
    (`_row_col` checks that the tile loops index them); no other dimension may depend on a
    tile loop."""
    for d, e in enumerate(acc.dims):
        if d not in dims and any(coefficients(e, tvars, bounds, what)):
            raise LoweringError(f"tensorize: {what} indexes dimension {d} by a tile loop")
    return tile_number(acc, dims, tvars, bounds, what)


def matrix_tile(acc: Access, row: Var, col: Var, bounds, what: str) -> ir.MatrixTile:
    """The global / shared tile whose rows `row` and columns `col` index."""
    if acc.buffer.scope not in ("global", "shared"):
        raise LoweringError(
            f"tensorize: {what} reads or writes {acc.buffer.name} ({acc.buffer.scope}); a "
            "Tensor Core tile lives in global or shared memory"
        )
    rs, cs = coefficients(acc.flat, [row, col], bounds, what)
    origin = at_origin(acc.flat, [row, col])
    if cs == 1 and rs > 0:
        return ir.MatrixTile(acc.buffer, origin, rs, "row_major")
    if rs == 1 and cs > 0:
        return ir.MatrixTile(acc.buffer, origin, cs, "col_major")
    raise LoweringError(
        f"tensorize: {what} walks {acc.buffer.name} with row stride {rs} and column stride "
        f"{cs}; one of them must be 1"
    )


__all__ = [
    "OPERAND_DTYPES",
    "Access",
    "at_origin",
    "coefficients",
    "fragment_shape",
    "fragment_tile",
    "load_access",
    "matrix_tile",
    "own_access",
    "tile_number",
    "var_dim",
]
