"""Tensors and the operations that produce them: placeholders and computes."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from autosched.errors import IndexCountError, ReduceAxisError, TEError
from autosched.te.dtype import check_dtype
from autosched.te.expr import Const, Expr, IterVar, Load, Reduce, Var, as_expr
from autosched.te.visitor import walk


def _check_shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TEError(f"the shape of {what} must be a tuple of ints, got {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d <= 0:
            raise TEError(f"the shape of {what} must hold positive ints, got {shape!r}")
    return dims


class TensorIterationError(TEError, TypeError):
    """Iterating over a te.Tensor (a TypeError too, as for any non-iterable object)."""


class Operation:
    """Base of PlaceholderOp and ComputeOp; compared by identity."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    _output: Tensor

    def output(self, index: int = 0) -> Tensor:
        if index != 0:
            raise TEError(f"operation {self.name!r} has a single output")
        return self._output

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class PlaceholderOp(Operation):
    def __init__(self, shape: tuple[int, ...], dtype: str, name: str) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype
        self.axis: tuple[IterVar, ...] = ()
        self.reduce_axis: tuple[IterVar, ...] = ()
        self.tag = ""
        self._output = Tensor(self)


class ComputeOp(Operation):
    """`name(axis...) = body`; a Reduce body makes it a reduction over `reduce_axis`."""

    def __init__(self, name: str, tag: str, axis: tuple[IterVar, ...], body: Expr, attrs: dict):
        self.name, self.tag, self.axis, self.body, self.attrs = name, tag, axis, body, attrs
        self.shape = tuple(a.extent for a in axis)
        self.dtype = body.dtype
        self.reduce_axis: tuple[IterVar, ...] = body.axes if isinstance(body, Reduce) else ()
        self._inputs = _input_tensors(body)
        self._output = Tensor(self)

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return self._inputs


def _input_tensors(body: Expr) -> tuple[Tensor, ...]:
    out: list[Tensor] = []
    for node in walk(body):
        if isinstance(node, Load) and isinstance(node.buffer, Tensor):
            if all(t is not node.buffer for t in out):
                out.append(node.buffer)
    return tuple(out)


# Elementwise binary operators by name, filled by `te.broadcast` (imported with the package): the
# table lets `Tensor`'s `+ - * /` broadcast without this module importing the operators.
BINARY_OPS: dict[str, Callable[[Any, Any], Tensor]] = {}


class Tensor:
    """The output of an operation; index it to read it: `A[i, k]`."""

    def __init__(self, op: Operation) -> None:
        self.op = op

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    def __getitem__(self, indices: Any) -> Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise IndexCountError(
                f"tensor {self.name!r} has {len(self.shape)} dimensions {list(self.shape)} "
                f"but was indexed with {len(indices)} indices"
            )
        idx = []
        for axis, (i, extent) in enumerate(zip(indices, self.shape, strict=True)):
            e = as_expr(i, "int32")
            if e.dtype not in ("int32", "int64"):
                raise TEError(
                    f"index {e!r} of tensor {self.name!r} must be an integer, not {e.dtype}"
                )
            if isinstance(e, Const) and not 0 <= e.value < extent:
                raise TEError(
                    f"tensor {self.name!r} of shape {list(self.shape)} is indexed with {e.value} "
                    f"on axis {axis} of extent {extent}; constant indices must lie in "
                    f"[0, {extent}) (negative indices do not count from the end)"
                )
            idx.append(e)
        return Load(self, idx)

    def __iter__(self) -> NoReturn:
        # Without this, Python would iterate by calling __getitem__(0), (1), ... forever.
        raise TensorIterationError(
            f"te.Tensor {self.name!r} is not iterable: index it ({self.name}[i, ...]) inside "
            "te.compute, and where a list of tensors is expected (a workload's return value, "
            f"ComputeDAG) pass a list such as [inputs..., {self.name}]"
        )

    def __repr__(self) -> str:
        return f"Tensor(name={self.name}, shape={list(self.shape)}, dtype={self.dtype})"

    # Elementwise arithmetic between tensors broadcasts, like TVM (`conv + bias`).
    def _broadcast(self, other: Any, op: str, reverse: bool = False) -> Tensor:
        binary = BINARY_OPS[op]
        return binary(other, self) if reverse else binary(self, other)

    def __add__(self, o: Any) -> Tensor:
        return self._broadcast(o, "add")

    def __radd__(self, o: Any) -> Tensor:
        return self._broadcast(o, "add", reverse=True)

    def __sub__(self, o: Any) -> Tensor:
        return self._broadcast(o, "subtract")

    def __mul__(self, o: Any) -> Tensor:
        return self._broadcast(o, "multiply")

    def __rmul__(self, o: Any) -> Tensor:
        return self._broadcast(o, "multiply", reverse=True)

    def __rsub__(self, o: Any) -> Tensor:
        return self._broadcast(o, "subtract", reverse=True)

    def __truediv__(self, o: Any) -> Tensor:
        return self._broadcast(o, "divide")

    def __rtruediv__(self, o: Any) -> Tensor:
        return self._broadcast(o, "divide", reverse=True)


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    return PlaceholderOp(_check_shape(shape, name), check_dtype(dtype), name).output(0)


def reduce_axis(dom: tuple[int, int], name: str = "rv") -> IterVar:
    """A reduction axis over [lo, hi)."""
    try:
        lo, hi = dom
    except (TypeError, ValueError):
        raise TEError(
            f"reduce_axis({dom!r}, {name!r}): the range must be a (lo, hi) pair"
        ) from None
    if not isinstance(lo, int) or not isinstance(hi, int) or hi <= lo:
        raise TEError(f"reduce_axis {name!r} has an empty or non-integer range {dom!r}")
    return IterVar(name, lo, hi - lo, IterVar.REDUCE)


def _axis_names(fcompute: Callable, ndim: int, name: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        return [f"i{i}" for i in range(ndim)]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{i}" for i in range(ndim)]
    if len(params) != ndim:
        raise TEError(
            f"compute {name!r}: the shape has {ndim} dimensions but fcompute takes "
            f"{len(params)} arguments ({', '.join(p.name for p in params)})"
        )
    return [p.name for p in params]


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., Any],
    name: str = "compute",
    tag: str = "",
    attrs: dict | None = None,
) -> Tensor:
    """A tensor whose element at `axis` is `fcompute(*axis)`."""
    dims = _check_shape(shape, name)
    axis = tuple(
        IterVar(n, 0, d, IterVar.SPATIAL)
        for n, d in zip(_axis_names(fcompute, len(dims), name), dims, strict=True)
    )
    body = as_expr(fcompute(*axis))
    _validate_body(name, axis, body)
    return ComputeOp(name, tag, axis, body, dict(attrs or {})).output(0)


def _validate_body(name: str, axis: tuple[IterVar, ...], body: Expr) -> None:
    allowed = {id(a) for a in axis}
    reduce_ids: set[int] = set()
    if isinstance(body, Reduce):
        reduce_ids = {id(a) for a in body.axes}
    for node in walk(body):
        if isinstance(node, Reduce) and node is not body:
            raise ReduceAxisError(
                f"compute {name!r}: a reduction must be the whole body, not nested inside it "
                f"(found {node!r}); split it into two computes"
            )
        if isinstance(node, Var) and id(node) not in allowed:
            if isinstance(node, IterVar) and node.kind == IterVar.REDUCE:
                if id(node) not in reduce_ids:
                    where = "a non-reduce compute" if not reduce_ids else "this compute's reduction"
                    raise ReduceAxisError(
                        f"compute {name!r}: reduce axis {node.name!r} is used in {where}; "
                        "wrap the body in te.sum/te.max/te.min over that axis"
                    )
            else:
                raise TEError(f"compute {name!r}: variable {node.name!r} is not one of its axes")


def with_axis_names(names: Sequence[str], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn(*axes)` with a signature naming its axes `names` (te.compute reads axis names there)."""

    def fcompute(*axes: Any) -> Any:
        return fn(*axes)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    fcompute.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, kind) for n in names]
    )
    return fcompute


def ax_names(ndim: int) -> list[str]:
    """TVM's default axis names for generated computes: ax0, ax1, ..."""
    return [f"ax{i}" for i in range(ndim)]


def topological_ops(outputs: Sequence[Operation]) -> list[Operation]:
    """The ops the outputs read, directly or not, and the outputs, producers before consumers
    (depth-first post-order from the outputs in their order: the DAG's printed order and its
    workload hash depend on it)."""
    order: list[Operation] = []
    done: set[int] = set()
    for root in outputs:  # iterative, so a deep DAG does not reach Python's recursion limit
        stack: list[tuple[Operation, bool]] = [(root, False)]
        while stack:
            op, expanded = stack.pop()
            if id(op) in done:
                continue
            if expanded:
                done.add(id(op))
                order.append(op)
                continue
            stack.append((op, True))
            stack.extend((t.op, False) for t in reversed(op.input_tensors) if id(t.op) not in done)
    return order
