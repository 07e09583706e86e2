"""Operands read through their memory layout: which torch values qualify, and the logical view
of the physical buffer against torch's own view of it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import autosched  # noqa: E402
from autosched import te  # noqa: E402
from autosched.frontend.extract import operand_value  # noqa: E402
from autosched.frontend.layout import (  # noqa: E402
    dense_order,
    logical_view,
    memory_layout,
    merged_groups,
)
from autosched.frontend.specs import Operand  # noqa: E402
from autosched.schedule.compute_dag import ComputeDAG  # noqa: E402


def test_only_permuted_dense_buffers_have_an_order():
    x = torch.randn(2, 5, 3, 4)
    assert dense_order(x) is None  # contiguous: nothing to gain
    assert dense_order(x.transpose(1, 2)) == (0, 2, 1, 3)
    assert dense_order(x[:, ::2]) is None  # strided, not a permutation of a dense buffer
    assert dense_order(x.transpose(1, 2)[:, :2]) is None


def test_merged_groups_flatten_runs_of_dims():
    assert merged_groups((6, 5, 4), (2, 3, 5, 4)) == ((0, 1), (2,), (3,))
    assert merged_groups((6, 20), (2, 3, 5, 4)) == ((0, 1), (2, 3))
    assert merged_groups((5, 4), (1, 5, 4)) == ((0, 1), (2,))
    assert merged_groups((3, 10, 4), (2, 3, 5, 4)) is None  # not a flattening


def test_the_logical_view_reads_the_buffer_as_torch_does():
    """softmax attention's q: a (batch, seq, head, dim) buffer viewed as (batch*head, seq,
    dim); the DAG reads the buffer in place and gets torch's values."""
    buffer = torch.randn(2, 5, 3, 4)
    view = buffer.transpose(1, 2)  # (2, 3, 5, 4)
    shape = (6, 5, 4)
    layout = memory_layout(view, shape)
    assert layout is not None and layout.physical_shape == (2, 5, 3, 4)
    o = Operand("q", shape, node=object(), layout=layout)
    passed = operand_value(o, view)
    assert passed.data_ptr() == buffer.data_ptr() and passed.is_contiguous()  # no copy
    physical = te.placeholder(layout.physical_shape, "float32", "q")
    read = logical_view(layout, physical, shape)
    got = autosched.evaluate(ComputeDAG([physical, read]), {"q": passed.numpy()})[read.name]
    np.testing.assert_array_equal(got, view.reshape(shape).numpy())
