"""Tensorized nests: lowering's hook for the "tensorize" annotation (docs/TENSOR_CORES.md).

A stage's Tensor Core role comes from its scope and body (`stage_role`): a matrix_a / matrix_b
cache stage loads, an accumulator stage with a sum fills (its init) and multiplies-accumulates
(its update), a stage whose body reads an accumulator stage stores. Where emission
(`emission.py`) reaches the iterator annotated "tensorize" it emits ONE warp statement instead
of the loops of that iterator and the ones inside it (`emit_tensorized`, `emit_fill`).

Every access is read per dimension: the tensorized loop variables set to 0 give its origin, their
coefficients its strides. A fragment buffer is a grid of tiles over two of its dimensions (its
row and column dimensions, found from the multiply-accumulate that reads it in
`plan_fragments`, before emission); its tiles are numbered over its dimensions in order, the two
tiled ones counting in steps of the tile's shape (`ir.tile_shape`: 16x16, or 16xK / Kx16 for
matrix_a / matrix_b, K by the operand dtype: 16 for float16 / bfloat16, 8 for TF32). A global or
shared tile is a `MatrixTile`: its row stride or its column stride must be 1 (col_major /
row_major), the other one is `ldm`. That reading of one access lives in `tensor_access.py`.

The functions take the `LoweringPlan`; they raise LoweringError for a nest that is not a whole tile,
since no state with such a nest is a valid Tensor Core program.
"""

from __future__ import annotations

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.arith import MemoBounds, is_multiple, simplify
from autosched.lower.bound_inference import loop_bounds
from autosched.lower.guards import guards
from autosched.lower.mma_layout import MMA_TYPES
from autosched.lower.mma_plan import MmaPlan
from autosched.lower.plan import LoweringPlan
from autosched.lower.tensor_access import (
    OPERAND_DTYPES,
    Access,
    at_origin,
    coefficients,
    fragment_shape,
    fragment_tile,
    load_access,
    matrix_tile,
    own_access,
    var_dim,
)
from autosched.lower.wgmma_ir import SharedOperand, WgmmaOperandTile
from autosched.lower.wgmma_operands import group_stride, operand_fields, swizzle_of, tile_dims
from autosched.schedule.stage import TENSORIZE
from autosched.te.expr import BinOp, Cast, Const, Expr, Load, Reduce, Var
from autosched.te.tensor import Tensor
from autosched.te.visitor import free_vars

T = ir.WMMA_TILE


def stage_role(plan: LoweringPlan, i: int) -> str | None:
    """The Tensor Core role of a stage ("load", "mma" or "store"); None for other stages."""
    scope = plan.info[i].scope
    if scope in ir.OPERAND_SCOPES:
        return "load"
    if scope == ir.ACCUMULATOR_SCOPE:
        return "mma"
    body = plan.info[i].body
    if isinstance(body, Load) and isinstance(body.buffer, Tensor):
        j = plan.producer_stage[id(body.buffer.op)]
        if plan.info[j].scope == ir.ACCUMULATOR_SCOPE:
            return "store"
    return None


def tensorize_position(plan: LoweringPlan, i: int) -> int | None:
    """Index of stage i's iterator annotated "tensorize" (None when it has none), after checking
    that a stage that needs one has one and that nothing is computed inside the nest."""
    st = plan.stages[i]
    pos = next((k for k, it in enumerate(st.iters) if it.annotation == TENSORIZE), None)
    role = stage_role(plan, i)
    if pos is None:
        if role is not None:
            raise LoweringError(
                f"stage {st.name!r} ({plan.info[i].scope}) reads or writes a Tensor Core fragment "
                "but has no tensorized nest; fragments cannot be indexed element-wise "
                "(State.tensorize)"
            )
        return None
    if role is None:
        raise LoweringError(
            f"stage {st.name!r} is tensorized but is no Tensor Core load, multiply-accumulate "
            "or store (its scope and body say what it is)"
        )
    for it in st.iters[pos:]:
        if plan.attached.get((i, it.name)):
            raise LoweringError(
                f"tensorize: stages are computed at {st.name}.{it.name}, inside the tensorized nest"
            )
        if it is not st.iters[pos] and it.annotation != "none":
            raise LoweringError(
                f"tensorize: {st.name}.{it.name} is annotated {it.annotation!r} inside the "
                "tensorized nest"
            )
    return pos


# ---- the nests ---------------------------------------------------------------------------------


def copy_nest_extents(plan: LoweringPlan, i: int, role: str) -> tuple[tuple[int, ...], tuple[()]]:
    """The extents the tensorized nest of a load or store stage i must have: (spatial ones
    sorted, no reduce ones). A load's are its fragment's tile shape, a store's 16, 16 (a
    multiply-accumulate's are `analyse_mma`'s: 16, 16 and the K of its operands' dtype)."""
    if role == "load":
        return tuple(sorted(fragment_shape(plan.info[i].buf))), ()
    return (T, T), ()


def var_extents(plan: LoweringPlan, i: int, pos: int) -> dict[int, int]:
    """id(loop variable) -> extent, over stage i's tensorized nest."""
    st, inf = plan.stages[i], plan.info[i]
    return {id(plan.var_of(i, it.name)): inf.ext[it.name] for it in st.iters[pos:]}


def nest_vars(
    plan: LoweringPlan, i: int, pos: int, want: tuple[tuple[int, ...], tuple[int, ...]]
) -> tuple[list[Var], list[Var]]:
    """The (spatial, reduce) loop variables of stage i's tensorized nest, checked to have the
    extents `want` (spatial ones sorted, reduce ones)."""
    st, inf = plan.stages[i], plan.info[i]
    iters = st.iters[pos:]
    want_sp, want_red = want
    spatial = [it for it in iters if it.kind == "spatial"]
    reduce = [it for it in iters if it.kind != "spatial"]
    exts = [inf.ext[it.name] for it in iters]
    got_sp = tuple(sorted(inf.ext[it.name] for it in spatial))
    got_red = tuple(inf.ext[it.name] for it in reduce)
    if got_sp != want_sp or got_red != want_red:
        shape = f"{len(want_sp)} spatial" + (f" + {len(want_red)} reduce" if want_red else "")
        wanted = set(want_sp + want_red)
        extent = f"extent {T}" if wanted == {T} else f"extents {list(want_sp + want_red)}"
        raise LoweringError(
            f"tensorize: the nest of {st.name}.{iters[0].name} must be {shape} iterators of "
            f"{extent}; it is {list(zip([it.name for it in iters], exts, strict=True))}"
        )
    return (
        [plan.var_of(i, it.name) for it in spatial],
        [plan.var_of(i, it.name) for it in reduce],
    )


def nest_bounds(plan: LoweringPlan, i: int) -> MemoBounds:
    """The bounds of stage i's loops and those it is computed inside, remembering the affine
    form of each expression read under them (`arith.MemoBounds`): reading a tensorized nest
    takes the coefficients of each access dimension once per tensorized loop."""
    st = plan.stages[i]
    return MemoBounds(loop_bounds(plan, plan.info[i].context + [(i, it.name) for it in st.iters]))


def whole_tile_guard(
    c: Expr, tvars: list[Var], exts: dict[int, int], bounds, padded: bool = False
) -> Expr | None:
    """`origin + v < C` or `origin + v >= C` with one tile loop `v` (coefficient 1, extent E
    in `exts`, by id) and `origin`, `C` multiples of E: the same test as `origin < C` (`>=`)
    for every v in 0..E-1, so the guard keeps or drops whole tiles (an extent that is a
    multiple of the tile but not of the block tile). With `padded`, `origin + v < C` for any
    C becomes `origin < C`: a tile holding an element in range runs whole, past the edge (a
    padded extent; only for statements whose memory tiles are shared or fragments, to which
    bound inference gives whole tiles). None for any other guard."""
    if not (isinstance(c, BinOp) and c.op in ("<", ">=") and isinstance(c.b, Const)):
        return None
    coeffs = coefficients(c.a, tvars, bounds, "a guard")
    origin = at_origin(c.a, tvars)
    if sorted(coeffs) != [0] * (len(tvars) - 1) + [1]:
        return None
    ext = exts[id(tvars[coeffs.index(1)])]
    past_edge = padded and c.op == "<"
    if (int(c.b.value) % ext and not past_edge) or not is_multiple(origin, ext, bounds):
        return None
    return BinOp(c.op, origin, c.b, "bool")


def guarded_warp(
    stmt: ir.WarpStmt,
    conds: list[Expr],
    tvars: list[Var],
    exts: dict[int, int],
    bounds,
    name,
    padded: bool = False,
) -> ir.Stmt:
    """`stmt` under its guards, which must not depend on the tile loops (extents `exts`, by
    id) but through `whole_tile_guard` (`padded` passed on): one that does cuts the tile."""
    ids = {id(v) for v in tvars}
    out = []
    for c in conds:
        if any(id(v) in ids for v in free_vars(c)):
            whole = whole_tile_guard(c, tvars, exts, bounds, padded)
            if whole is None:
                rows, cols = ir.tile_shape(stmt.fragments()[0][0])
                raise LoweringError(
                    f"tensorize: partial {rows}x{cols} tile in {name}: the guard {c!r} depends "
                    "on the tensorized loops"
                )
            c = whole
        out.append(c)
    return ir.guarded(stmt, out)


def mma_operands(plan: LoweringPlan, i: int) -> tuple[Load, Load]:
    """The (matrix_a, matrix_b) fragment loads of an accumulator stage's
    `acc + cast?(a) * cast?(b)` (either order), checked."""
    st, body = plan.stages[i], plan.info[i].body
    bad = LoweringError(
        f"tensorize: {st.name!r} must be sum(cast?(A_frag[..]) * cast?(B_frag[..])) over "
        "matrix_a and matrix_b fragments"
    )
    if not isinstance(body, Reduce) or body.reducer.name != "sum" or body.condition is not None:
        raise bad
    src = body.source
    if not (isinstance(src, BinOp) and src.op == "*"):
        raise bad
    by_scope = {}
    for e in (src.a, src.b):
        while isinstance(e, Cast):
            e = e.value
        if not (isinstance(e, Load) and isinstance(e.buffer, Tensor)):
            raise bad
        j = plan.producer_stage[id(e.buffer.op)]
        by_scope[plan.info[j].scope] = e
    if set(by_scope) != set(ir.OPERAND_SCOPES):
        raise bad
    return by_scope["wmma.matrix_a"], by_scope["wmma.matrix_b"]


def analyse_mma(plan: LoweringPlan, i: int, pos: int) -> MmaPlan:
    a_load, b_load = mma_operands(plan, i)
    a, b = load_access(plan, i, a_load), load_access(plan, i, b_load)
    for acc, dtypes in ((a, OPERAND_DTYPES), (b, OPERAND_DTYPES), (plan.info[i].buf, None)):
        buf = acc.buffer if isinstance(acc, Access) else acc
        ok = buf.dtype in dtypes if dtypes else buf.dtype == "float32"
        if not ok:
            raise LoweringError(
                f"tensorize: {buf.name} ({buf.scope}) has dtype {buf.dtype}; matrix fragments "
                f"hold {OPERAND_DTYPES}, accumulators float32"
            )
    if a.buffer.dtype != b.buffer.dtype:
        raise LoweringError(
            f"tensorize: {a.buffer.name} is {a.buffer.dtype} but {b.buffer.name} is "
            f"{b.buffer.dtype}; one wmma shape takes one operand dtype"
        )
    # the operands' dtypes are checked above: their K is the reduce loop's extent
    spatial, (k,) = nest_vars(plan, i, pos, ((T, T), (ir.operand_k(a.buffer.dtype),)))
    bounds = nest_bounds(plan, i)
    name = plan.stages[i].name

    def uses(access: Access, v: Var) -> bool:
        return any(any(coefficients(e, [v], bounds, name)) for e in access.dims)

    ms = [v for v in spatial if uses(a, v) and not uses(b, v)]
    ns = [v for v in spatial if uses(b, v) and not uses(a, v)]
    if len(ms) != 1 or len(ns) != 1 or not (uses(a, k) and uses(b, k)):
        raise LoweringError(
            f"tensorize: in {name!r} the matrix_a operand must be indexed by one tensorized "
            "spatial loop (M) and the reduce loop (K), matrix_b by the other (N) and K"
        )
    return MmaPlan(ms[0], ns[0], k, own_access(plan, i), a, b)


def plan_fragments(plan: LoweringPlan) -> None:
    """Fill `plan.fragment_dims` (per fragment stage, its (row, column) dimensions: M x K for
    matrix_a, K x N for matrix_b, M x N for accumulators) and `plan.mma_plans` from the
    tensorized multiply-accumulates, and give each fragment buffer the instruction family of
    the multiply-accumulate that uses it (`fragment_flavours`), before emission."""
    out = plan.fragment_dims
    flavours: dict[int, str] = {}  # id(fragment buffer) -> its instruction family
    for i in range(len(plan.stages)):
        if plan.info[i].body is None or plan.info[i].scope != ir.ACCUMULATOR_SCOPE:
            continue
        pos = tensorize_position(plan, i)
        assert pos is not None  # an accumulator without a tensorized nest raised above
        mma = plan.mma_plans[i] = analyse_mma(plan, i, pos)
        bounds = nest_bounds(plan, i)
        name = plan.stages[i].name
        for access, row, col in (
            (mma.acc, mma.m, mma.n),
            (mma.a, mma.m, mma.k),
            (mma.b, mma.k, mma.n),
        ):
            dims = (var_dim(access, row, bounds, name), var_dim(access, col, bounds, name))
            if out.setdefault(access.stage, dims) != dims:
                raise LoweringError(
                    f"tensorize: fragment {access.buffer.name} is tiled over dimensions "
                    f"{out[access.stage]} and {dims} by different multiply-accumulates"
                )
        fragment_flavours(plan.stages[i].tensor_core_instruction, mma, name, flavours)
        if plan.stages[i].fragment_double_buffer:  # lower/fragment_double_buffer.py
            mma.a.buffer.fragment_double_buffer = mma.b.buffer.fragment_double_buffer = True
        if plan.stages[i].tensor_core_instruction == ir.WGMMA_FLAVOUR:
            for op, k_at in ((mma.a, 1), (mma.b, 0)):  # matrix_a is M x K, matrix_b K x N
                j = shared_source(plan, op.stage)
                plan.wgmma_stages[j] = operand_swizzle(plan, j, out[op.stage][k_at], op is mma.b)


def operand_swizzle(plan: LoweringPlan, j: int, k_dim: int, is_b: bool) -> str:
    """The layout of shared stage j that wgmmas read (as B where `is_b`), K being its
    dimension `k_dim` (`wgmma_operands.swizzle_of`)."""
    inf = plan.info[j]
    shape = inf.buf.shape[len(inf.buf.shape) - len(inf.region) :]  # past any slots
    row_dim, col_dim = tile_dims(shape, plan.stages[j].name)
    rows, cols = shape[row_dim], shape[col_dim]
    return swizzle_of(rows, cols, inf.region[col_dim], col_dim == k_dim, is_b)


def shared_source(plan: LoweringPlan, frag_stage: int) -> int:
    """The shared stage a matrix fragment stage copies (what wgmmas read instead)."""
    body = plan.info[frag_stage].body
    if isinstance(body, Load) and isinstance(body.buffer, Tensor):
        j = plan.producer_stage[id(body.buffer.op)]
        if plan.info[j].scope == "shared":
            return j
    raise LoweringError(
        f"tensorize: wgmma reads its operands from shared memory, but "
        f"{plan.stages[frag_stage].name} does not copy a shared stage"
    )


def fragment_flavours(flavour: str, mma: MmaPlan, name: str, given: dict[int, str]) -> None:
    """Give the accumulator and operand fragments of one multiply-accumulate (of stage `name`)
    its instruction family; one fragment is of one family (`given`: those given so far, by
    id). The "wgmma" family keeps an mma-flavour accumulator and marks the operand fragments
    `ir.WGMMA_FLAVOUR`: wgmmas read their tiles from shared memory (`warpgroup_mma`)."""
    if flavour not in (*ir.FRAGMENT_FLAVOURS, ir.WGMMA_FLAVOUR):
        raise LoweringError(f"tensorize: unknown instruction family {flavour!r} of {name!r}")
    if flavour in ("mma", ir.WGMMA_FLAVOUR) and mma.a.buffer.dtype not in MMA_TYPES:
        raise LoweringError(
            f"tensorize: {name!r} multiplies {mma.a.buffer.dtype} fragments; {flavour} takes "
            f"{tuple(MMA_TYPES)} (use wmma)"
        )
    for access in (mma.acc, mma.a, mma.b):
        buf = access.buffer
        first = given.setdefault(id(buf), flavour)
        if first != flavour:
            raise LoweringError(
                f"tensorize: fragment {buf.name} is used by {first} and {flavour} "
                "multiply-accumulates"
            )
        operand = access is not mma.acc
        buf.fragment_flavour = "mma" if flavour == ir.WGMMA_FLAVOUR and not operand else flavour


def _row_col(plan, frag: Access, tvars: list[Var], bounds, what) -> tuple[Var, Var, tuple]:
    """Which of a load / store / fill's two tile loops walks the rows of fragment `frag` and
    which its columns, and the fragment's planned (row, column) dimensions they index."""
    planned = plan.fragment_dims.get(frag.stage)
    if planned is None:
        raise LoweringError(
            f"tensorize: fragment {frag.buffer.name} is read by no tensorized multiply-accumulate"
        )
    by_dim = {var_dim(frag, v, bounds, what): v for v in tvars}
    if set(by_dim) != set(planned):
        raise LoweringError(
            f"tensorize: {what} tiles {frag.buffer.name} over dimensions {sorted(by_dim)}, but "
            f"its multiply-accumulate over {planned}"
        )
    return by_dim[planned[0]], by_dim[planned[1]], planned


def emit_fill(plan: LoweringPlan, i: int, pos: int) -> ir.Stmt:
    """The init of an accumulator stage's tensorized nest: fill the tile with the identity."""
    st = plan.stages[i]
    spatial = [plan.var_of(i, it.name) for it in st.iters[pos:] if it.kind == "spatial"]
    bounds = nest_bounds(plan, i)
    own = own_access(plan, i)
    what = f"{st.name} (fill)"
    _, _, dims = _row_col(plan, own, spatial, bounds, what)
    tile = fragment_tile(own, dims, spatial, bounds, what)
    stmt = ir.FragmentFill(own.buffer, tile, plan.reduction(i).identity)
    exts = var_extents(plan, i, pos)
    conds = guards(plan, i, spatial_only=True)
    return guarded_warp(stmt, conds, spatial, exts, bounds, what, padded=True)


def check_orientation(frag: ir.Buffer, row: Var, col: Var, exts: dict[int, int], name) -> None:
    """The loops walking a fragment's rows and columns have its tile's rows and columns as
    extents (a 16x8 matrix_a tile is not walked 8x16)."""
    want = fragment_shape(frag)
    got = (exts[id(row)], exts[id(col)])
    if got != want:
        raise LoweringError(
            f"tensorize: {name} walks a {got[0]}x{got[1]} tile of {frag.name}, whose tiles are "
            f"{want[0]}x{want[1]}"
        )


def wgmma_operand_tile(
    frag: ir.Buffer,
    tile: Expr,
    src: Access,
    columns: int,
    row: Var,
    col: Var,
    bounds,
    name,
    swizzle: str = "none",
) -> ir.Stmt:
    """The stand-in of a tile load into a fragment that wgmmas read: the 16x16 shared tile
    (rows `row`, columns `col` of the fragment), in its stage's canonical layout (whose rows
    hold `columns` elements) or its swizzled one."""
    shape = src.buffer.shape[len(src.buffer.shape) - len(src.dims) :]  # past any slots
    row_dim, col_dim = tile_dims(shape, src.buffer.name)
    dims = {var_dim(src, v, bounds, name): v for v in (row, col)}
    if set(dims) != {row_dim, col_dim}:
        raise LoweringError(
            f"tensorize: {name} tiles dimensions {sorted(dims)} of {src.buffer.name}, not the "
            f"{(row_dim, col_dim)} its canonical layout spans"
        )
    k_is_col = frag.scope == "wmma.matrix_a"  # matrix_a: M x K; matrix_b: K x N
    contiguous_is_k = (dims[col_dim] is col) == k_is_col
    stride = group_stride(shape[row_dim], shape[col_dim], columns)
    major, lbo, sbo = operand_fields(contiguous_is_k, stride, swizzle, shape[row_dim])
    origin = simplify(at_origin(src.flat, [row, col]), bounds)
    operand = SharedOperand(src.buffer, origin, major, lbo, sbo, swizzle)
    return WgmmaOperandTile(frag, tile, operand)


def emit_tensorized(plan: LoweringPlan, i: int, pos: int) -> ir.Stmt:
    """The warp statement replacing stage i's loops from iterator `pos` inward (the update of
    a reduction; its fill comes from `emit_fill`)."""
    st = plan.stages[i]
    role = stage_role(plan, i)
    bounds = nest_bounds(plan, i)
    name = st.name
    exts = var_extents(plan, i, pos)
    assert role is not None  # tensorize_position refused a tensorized stage without one
    stmt: ir.WarpStmt
    if role == "mma":
        mma = plan.mma_plans[i]
        tvars = [mma.m, mma.n, mma.k]
        planned = plan.fragment_dims  # checked against the accesses by plan_fragments

        def tile(access: Access) -> Expr:
            return fragment_tile(access, planned[access.stage], tvars, bounds, name)

        stmt = ir.FragmentMma(
            mma.acc.buffer,
            tile(mma.acc),
            mma.a.buffer,
            tile(mma.a),
            mma.b.buffer,
            tile(mma.b),
        )
        if mma.a.buffer.fragment_flavour == ir.WGMMA_FLAVOUR:
            # the tests of the tensor's edges dropped, as for the wgmma operand tiles below;
            # any other guard puts the product under a condition, which warpgroup_mma refuses
            conds = guards(plan, i, spatial_only=False, edges=[])
        else:
            conds = guards(plan, i, spatial_only=False)
        return guarded_warp(stmt, conds, tvars, exts, bounds, name, padded=True)
    tvars, _ = nest_vars(plan, i, pos, copy_nest_extents(plan, i, role))
    own = own_access(plan, i)
    body = plan.info[i].body
    if not (isinstance(body, Load) and isinstance(body.buffer, Tensor)):
        raise LoweringError(f"tensorize: {name!r} must copy one tensor to load or store a tile")
    src = load_access(plan, i, body)
    if role == "load" and own.buffer.fragment_flavour == ir.WGMMA_FLAVOUR:
        row, col, dims = _row_col(plan, own, tvars, bounds, name)
        number = fragment_tile(own, dims, tvars, bounds, name)
        shared = plan.info[src.stage]
        _, col_dim = tile_dims(shared.buf.shape[len(shared.buf.shape) - len(src.dims) :], name)
        columns = shared.region[col_dim]
        swizzle = plan.wgmma_stages.get(src.stage, "none")
        operand_tile = wgmma_operand_tile(
            own.buffer, number, src, columns, row, col, bounds, name, swizzle
        )
        # No test of the tensor's edges (a padded M, N or K): a warpgroup's 4 warps issue each
        # wgmma together, so none may skip its 16-row slab. Past the edge a wgmma reads whole
        # shared tiles (bound inference gives shared stages whole tiles), which their fetch
        # zero-fills there: K past the edge adds zeros, and M or N past it reach only
        # accumulator rows or columns that the copy-out's guards never store.
        if guards(plan, i, spatial_only=True, edges=[]):
            raise LoweringError(f"tensorize: wgmma operand {name} is guarded")
        return operand_tile
    if role == "load":
        row, col, dims = _row_col(plan, own, tvars, bounds, name)
        check_orientation(own.buffer, row, col, exts, name)
        stmt = ir.FragmentLoad(
            own.buffer,
            fragment_tile(own, dims, tvars, bounds, name),
            matrix_tile(src, row, col, bounds, name),
        )
    else:
        row, col, dims = _row_col(plan, src, tvars, bounds, name)
        stmt = ir.FragmentStore(
            matrix_tile(own, row, col, bounds, name),
            src.buffer,
            fragment_tile(src, dims, tvars, bounds, name),
        )
    # a tile of global memory never runs past the tensor's edge; shared ones are whole tiles
    padded = getattr(stmt, stmt.MEMORY_TILE).buffer.scope != "global"
    conds = guards(plan, i, spatial_only=True)
    return guarded_warp(stmt, conds, tvars, exts, bounds, name, padded=padded)
