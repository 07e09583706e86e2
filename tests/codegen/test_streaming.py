"""Streaming accesses (codegen/streaming.py): a kernel marked `stream_writes` stores the global
buffers it never loads with evict-first stores (`__stcs`), scalars and 16-byte vectors alike;
the hint is recorded and replayed as a pragma, and the verifier rejects it on a kernel that
stores no such buffer. A kernel marked `stream_reads` streams its largest read-only inputs
only, not the smaller operands every row re-reads."""

from __future__ import annotations

import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.verify import verify_program
from autosched.schedule.steps.annotation import PragmaStep
from autosched.te.expr import BinOp, Const, Load, Var
from tests.sketch.test_cross_block import row_sums

X = ir.Buffer("X", (128,), "float32")
Y = ir.Buffer("Y", (128,), "float32")
TX = ir.THREAD_VARS["threadIdx.x"]


def kernel(body: ir.Stmt, stream_writes: bool = True) -> ir.Program:
    k = ir.Kernel("k", (1, 1, 1), (32, 1, 1), [], body, stream_writes=stream_writes)
    return ir.Program([k], [X, Y], [Y])


def test_a_marked_kernel_stores_its_outputs_by_streaming_stores():
    scalar = ir.Store(Y, TX, BinOp("*", Load(X, (TX,)), Const(2.0, "float32"), "float32"))
    verify_program(kernel(scalar))
    assert "__stcs(&Y[((int)threadIdx.x)], (X[((int)threadIdx.x)] * 2.000000000e+00f));" in (
        codegen_program(kernel(scalar))
    )
    assert "__stcs" not in codegen_program(kernel(scalar, stream_writes=False))
    lane = Var("lane")
    at = BinOp("+", BinOp("*", TX, ir.int32(4), "int32"), lane, "int32")
    vector = ir.For(lane, 4, "vectorize", ir.Store(Y, at, Load(X, (at,))))
    source = codegen_program(kernel(vector))
    assert "__stcs(reinterpret_cast<float4*>(&Y[(((int)threadIdx.x) * 4)]), " in source, source


def test_the_verifier_accepts_the_hint_only_on_a_kernel_that_stores_a_buffer_it_never_loads():
    in_place = ir.Store(Y, TX, BinOp("+", Load(Y, (TX,)), Load(X, (TX,)), "float32"))
    with pytest.raises(LoweringError, match="stream_writes, but it stores no global buffer"):
        verify_program(kernel(in_place))


def test_the_pragma_round_trips_and_checks_its_value():
    step = PragmaStep(1, 0, "stream_writes$1")
    assert PragmaStep.from_record(step.to_record()) == step
    state = row_sums((16, 96)).get_init_state()
    assert state.pragma(1, 0, "stream_writes", 1).stages[1].stream_writes
    with pytest.raises(Exception, match="stream_writes must be 0 or 1"):
        state.apply(PragmaStep(1, 0, "stream_writes$2"))


def test_streaming_reads_leave_the_operands_every_row_reads_to_the_cache():
    """A row scaled by a weight: the rows stream (`__ldcs`), the weight is read plainly."""
    w = ir.Buffer("W", (32,), "float32")
    scaled = BinOp(
        "*", Load(X, (TX,)), Load(w, (BinOp("%", TX, ir.int32(32), "int32"),)), "float32"
    )
    k = ir.Kernel("k", (1, 1, 1), (32, 1, 1), [], ir.Store(Y, TX, scaled), stream_reads=True)
    source = codegen_program(ir.Program([k], [X, w, Y], [Y]))
    assert "__ldcs(&X[" in source and "__ldcs(&W" not in source and "W[" in source, source
