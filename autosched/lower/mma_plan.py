"""The records tensorized lowering plans with: one access of a stage (`Access`) and the
analysed multiply-accumulate of an accumulator stage (`MmaPlan`). Plain data, kept apart from
the code that computes them (`tensor_access`, `tensorize`) so the lowering plan can hold them."""

from __future__ import annotations

from dataclasses import dataclass

from autosched.lower import ir
from autosched.te.expr import Expr, Var


@dataclass
class Access:
    """One access of a stage: the buffer, its per-dimension indices (relative to the buffer)
    and its flat index."""

    buffer: ir.Buffer
    dims: list[Expr]
    flat: Expr
    stage: int


@dataclass
class MmaPlan:
    """The analysed multiply-accumulate of one accumulator stage: its loop variables by role
    and its three accesses."""

    m: Var
    n: Var
    k: Var
    acc: Access
    a: Access
    b: Access
