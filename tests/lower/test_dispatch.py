"""The typed node-type tables (autosched/lower/dispatch.py)."""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower.dispatch import TypeTable


def test_a_handler_is_found_by_the_exact_type_of_its_node():
    table: TypeTable[ir.Stmt, [int], str] = TypeTable()
    table.register(ir.Barrier, lambda s, d: f"barrier at {d}")
    table.register(ir.Seq, lambda s, d: f"{len(s.stmts)} statements at {d}")
    barrier = ir.Barrier()
    handler = table.handler(barrier)
    assert handler is not None and handler(barrier, 2) == "barrier at 2"
    seq = ir.Seq([barrier, barrier])
    found = table.handler(seq)
    assert found is not None and found(seq, 0) == "2 statements at 0"
    assert ir.Barrier in table and ir.For not in table


def test_a_node_of_an_unregistered_type_has_no_handler():
    class Marker(ir.Barrier):
        """A subclass: dispatch is by exact type, so it does not inherit its base's handler."""

    table: TypeTable[ir.Stmt, [], str] = TypeTable()
    table.register(ir.Barrier, lambda s: "barrier")
    assert table.handler(Marker()) is None
    assert table.handler(ir.Seq([])) is None
