"""What the partition holds: operands, anchors and element-wise epilogues, torch-free.

An operand is either a runtime tensor (an fx node, passed to the kernel on each call) or a
constant bound once at compile time (a parameter, a folded batch-norm scale). `shape` is the
shape the DAG's placeholder has; the runtime reshapes the torch value to it (a linear layer's
leading dims flattened, a depthwise kernel viewed as (C, M, KH, KW)), after broadcasting it
to `expand` when that is set (an attention mask), or passes it as it lies in memory when it
has a `layout`; `dtype` is the placeholder's te dtype, the
tensor's own (float32, float16 or bfloat16).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autosched.frontend.layout import MemoryLayout


@dataclass
class Operand:
    """One input of a fused group: a runtime node or a bound constant, and its DAG shape."""

    role: str
    shape: tuple[int, ...]
    node: Any = None  # torch.fx.Node, when the value is computed at run time
    value: Any = None  # torch.Tensor, when the value is a constant bound at compile time
    dtype: str = "float32"
    expand: tuple[int, ...] | None = None  # the torch shape to broadcast to before reshaping
    additive: bool = False  # a boolean attention mask, passed as 0 (True) / -inf (False)
    layout: MemoryLayout | None = None  # read as it lies in memory (layout.py), not copied

    @property
    def placeholder_shape(self) -> tuple[int, ...]:
        """The shape of the DAG's placeholder: the physical one when read through a layout."""
        return self.shape if self.layout is None else self.layout.physical_shape

    @property
    def is_constant(self) -> bool:
        return self.node is None


@dataclass
class Anchor:
    """The op a group is built around (a contraction, reduction or pooling): its kind in
    `dag_builder.ANCHOR_BUILDERS`, its hyper-parameters and operands (data first)."""

    kind: str
    attrs: dict
    operands: list[Operand]
    out_shape: tuple[int, ...]  # the DAG output's shape (may be a reshape of the torch shape)

    @property
    def dtype(self) -> str:
        """The dtype the anchor's data operand (and so its inputs) has."""
        return self.operands[0].dtype


@dataclass
class Epilogue:
    """An element-wise consumer fused after the anchor: its kind in `dag_builder.EPILOGUE_
    BUILDERS`, attributes (the activation's name, the binary op) and extra operands."""

    kind: str
    attrs: dict = field(default_factory=dict)
    operands: list[Operand] = field(default_factory=list)

    @property
    def silent(self) -> bool:
        """Whether the epilogue leaves the values as they are (a copy, inference dropout, a
        reshape of the contiguous output): it is not named in the group's name."""
        return self.kind in ("identity", "reshape")

    @property
    def label(self) -> str:
        return self.attrs.get("name", self.attrs.get("op", self.kind))
