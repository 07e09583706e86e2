"""Operands read in the memory order PyTorch left them in, instead of copied to it.

A runtime tensor is often a permuted view of a dense buffer: the query, key and value of
`scaled_dot_product_attention` are a projection's (batch, sequence, head, dim) output viewed as
(batch, head, sequence, dim). Reshaping such a view to the DAG's placeholder shape costs a copy
kernel on every call. An operand with a `MemoryLayout` instead passes the buffer as it lies
(`value.permute(order)`, contiguous, no copy) to a placeholder of that physical shape, and the
DAG reads it through an element-wise `T_layout` stage of the logical shape, which the sketch
rules inline into its readers (the tile fetch reads the buffer directly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autosched import te


@dataclass(frozen=True)
class MemoryLayout:
    """`order`: the torch value's dims from outermost to innermost in memory; `torch_shape`:
    the value's (logical) shape; `groups`: for each dim of the DAG's operand shape, the torch
    dims merged into it (the operand shape is the torch shape with runs of dims flattened)."""

    order: tuple[int, ...]
    torch_shape: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]

    @property
    def physical_shape(self) -> tuple[int, ...]:
        return tuple(self.torch_shape[d] for d in self.order)

    def physical_index(self, index: tuple[te.Expr, ...]) -> tuple[te.Expr, ...]:
        """The physical placeholder's index of the operand-shape `index`."""
        logical: dict[int, Any] = {}
        for x, group in zip(index, self.groups, strict=True):
            sizes = [self.torch_shape[d] for d in group]
            for j, d in enumerate(group):
                if sizes[j] == 1:
                    logical[d] = 0
                    continue
                inner = math.prod(sizes[j + 1 :])
                digit = x // inner if inner > 1 else x
                logical[d] = digit % sizes[j] if j > 0 else digit
        return tuple(logical[d] for d in self.order)


def dense_order(value: Any) -> tuple[int, ...] | None:
    """The memory order of a tensor (meta) value that is a permutation of a dense buffer, not
    already contiguous; None otherwise."""
    if value is None or not hasattr(value, "stride") or value.is_contiguous():
        return None
    shape, strides = tuple(value.shape), tuple(value.stride())
    order = tuple(sorted(range(len(shape)), key=lambda d: (-strides[d], d)))
    expected = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != expected:
            return None
        expected *= shape[d]
    return order


def merged_groups(
    shape: tuple[int, ...], torch_shape: tuple[int, ...]
) -> tuple[tuple[int, ...], ...] | None:
    """For each dim of `shape`, the run of `torch_shape`'s dims whose product it is (None when
    `shape` is not `torch_shape` with runs of dims flattened)."""
    groups, t = [], 0
    for extent in shape:
        group, size = [], 1
        while t < len(torch_shape) and (size < extent or torch_shape[t] == 1):
            if size * torch_shape[t] > extent:
                return None
            group.append(t)
            size *= torch_shape[t]
            t += 1
        if size != extent:
            return None
        groups.append(tuple(group))
    if t != len(torch_shape) or any(not g for g in groups):
        return None
    return tuple(groups)


def memory_layout(value: Any, shape: tuple[int, ...]) -> MemoryLayout | None:
    """The layout an operand of DAG shape `shape` reads the torch (meta) `value` through, when
    `value` is a permuted dense buffer; None when it is contiguous or not a permutation."""
    order = dense_order(value)
    if order is None:
        return None
    torch_shape = tuple(value.shape)
    groups = merged_groups(shape, torch_shape)
    if groups is None:
        return None
    return MemoryLayout(order, torch_shape, groups)


def logical_view(layout: MemoryLayout, physical: te.Tensor, shape: tuple[int, ...]) -> te.Tensor:
    """The operand of `shape` read through `layout` from its `physical` placeholder."""
    return te.compute(
        shape,
        lambda *i: physical[layout.physical_index(i)],
        name=f"T_layout_{physical.name}",
        tag="elemwise",
    )
