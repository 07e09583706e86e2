"""Tests of program rows: statement rows reduced per program (costmodel/program_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import pack_features
from costmodel.program_rows import REDUCTIONS, parse_program_rows, reduce_statements


def test_parse_program_rows():
    assert parse_program_rows("statements") == ()
    assert parse_program_rows("max") == ("max",)
    assert parse_program_rows("sum_max") == ("sum", "max")
    assert parse_program_rows("_".join(REDUCTIONS)) == REDUCTIONS
    for bad in ("", "avg", "max_max", "max_", "Max"):
        with pytest.raises(ValueError, match="program_rows"):
            parse_program_rows(bad)


def test_reduce_statements_matches_a_loop_and_skips_invalid_programs():
    rng = np.random.default_rng(0)
    programs = [rng.random((n, 3)) for n in (2, 1, 4)]
    packed = pack_features([programs[0], None, programs[1], np.zeros((0, 3)), programs[2]])
    reduced = reduce_statements(packed.rows, packed.lengths, ("sum", "max", "min", "mean"))
    assert reduced.dtype == np.float32 and reduced.shape == (3, 12)  # invalid programs: no row
    for row, matrix in zip(reduced, programs, strict=True):
        m = matrix.astype(np.float32)
        expected = np.concatenate([m.sum(0), m.max(0), m.min(0), m.mean(0)])
        np.testing.assert_allclose(row, expected, rtol=1e-6)
    # The order of the blocks follows the spec.
    swapped = reduce_statements(packed.rows, packed.lengths, ("max", "sum"))
    np.testing.assert_array_equal(swapped[:, :3], reduced[:, 3:6])


def test_reduce_statements_with_no_valid_program():
    empty = pack_features([None, None], n_features=5)
    assert reduce_statements(empty.rows, empty.lengths, ("sum", "max")).shape == (0, 10)
