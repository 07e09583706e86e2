"""Typed tables from node type to handler: how the passes, the verifier, the interpreter and
the printers dispatch on IR statements and expressions.

A handler is registered for one exact node type and must accept that type (and the table's
extra arguments): mypy checks each registration, so a table is as well typed as an
isinstance chain, and adding a node type is one `register` per table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

Node = TypeVar("Node")
Kind = TypeVar("Kind")
Args = ParamSpec("Args")
Result = TypeVar("Result")


class TypeTable(Generic[Node, Args, Result]):
    """Handlers of `Node`s by their exact type; each takes the node, then `Args`."""

    def __init__(self) -> None:
        self._handlers: dict[type, Callable[..., Result]] = {}

    def register(
        self, kind: type[Kind], handler: Callable[Concatenate[Kind, Args], Result]
    ) -> None:
        """Dispatch nodes of exactly type `kind` to `handler`."""
        self._handlers[kind] = handler

    def handler(self, node: Node) -> Callable[Concatenate[Node, Args], Result] | None:
        """The handler of `node`'s type, or None when none is registered."""
        found: Callable[Concatenate[Node, Args], Result] | None = self._handlers.get(type(node))
        return found

    def __contains__(self, kind: Any) -> bool:
        return kind in self._handlers
