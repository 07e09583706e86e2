"""The naive DAG evaluator on hand-built DAGs, against hand-written numpy."""

from __future__ import annotations

import numpy as np
import pytest

from autosched import te
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.evaluate import (
    InputMismatchError,
    MissingInputError,
    evaluate,
    evaluate_ops,
    topo_ops,
)
from autosched.te.npeval import OutOfBoundsError

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


def test_two_stage_compute_with_select():
    a = te.placeholder((6, 5), name="A")
    b = te.placeholder((5,), name="B")
    shifted = te.compute(
        (6, 5),
        lambda i, j: te.if_then_else(j > 0, a[i, j - 1] * b[j], te.select(i < 3, b[j], 0.0)),
        name="shifted",
    )
    out = te.compute((6, 5), lambda i, j: te.max(shifted[i, j], a[i, j]) - 1.0, name="out")
    x, y = rand(6, 5), rand(5)
    got = evaluate([a, b, out], {"A": x, "B": y})
    want_shift = np.zeros((6, 5), "float32")
    want_shift[:, 1:] = x[:, :-1] * y[1:]
    want_shift[:3, 0] = y[0]
    np.testing.assert_array_equal(got["shifted"], want_shift)
    np.testing.assert_array_equal(got["out"], np.maximum(want_shift, x) - np.float32(1))


def test_custom_reducer_sum_of_abs():
    l1 = te.comm_reducer(lambda x, y: te.abs(x) + te.abs(y), lambda dtype: 0, name="l1")
    a = te.placeholder((4, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    out = te.compute((4,), lambda i: l1(a[i, k], axis=k), name="norm1")
    x = rand(4, 7)
    np.testing.assert_allclose(evaluate(out, {"A": x})["norm1"], np.abs(x).sum(1), rtol=1e-5)


def test_max_reduction_with_where():
    a = te.placeholder((5, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    # The max over even columns up to the row index; rows with no column get -inf.
    out = te.compute(
        (5,), lambda i: te.max(a[i, k], axis=k, where=te.all(k % 2 == 0, k <= i)), name="m"
    )
    x = rand(5, 8)
    want = [max(x[i, j] for j in range(0, 8, 2) if j <= i) for i in range(5)]
    np.testing.assert_array_equal(evaluate(out, {"A": x})["m"], np.array(want, "float32"))


def test_where_masks_out_of_bounds_reads():
    a = te.placeholder((6,), name="A")
    k = te.reduce_axis((0, 4), name="k")
    out = te.compute((6,), lambda i: te.sum(a[i + k], axis=k, where=i + k < 6), name="win")
    x = rand(6)
    want = [x[i : i + 4].astype("float64").sum() for i in range(6)]
    np.testing.assert_allclose(evaluate(out, {"A": x})["win"], want, rtol=1e-6)


def test_reduce_axis_with_nonzero_start():
    a = te.placeholder((3, 10), name="A")
    k = te.reduce_axis((2, 7), name="k")
    out = te.compute((3,), lambda i: te.sum(a[i, k] * a[i, k], axis=k), name="ss")
    x = rand(3, 10)
    want = (x[:, 2:7].astype("float64") ** 2).sum(1)
    np.testing.assert_allclose(evaluate(out, {"A": x})["ss"], want, rtol=1e-6)


def test_float_sums_accumulate_in_float64():
    a = te.placeholder((1, 4096), name="A")
    k = te.reduce_axis((0, 4096), name="k")
    out = te.compute((1,), lambda i: te.sum(a[i, k], axis=k), name="s")
    x = np.full((1, 4096), 0.1, "float32")
    x[0, 0] = 1e4
    want = np.float32(x.astype("float64").sum())
    assert evaluate(out, {"A": x})["s"][0] == want


def test_unguarded_out_of_bounds_read_names_the_tensor():
    a = te.placeholder((4,), name="A")
    out = te.compute((4,), lambda i: a[i + 1], name="next")
    with pytest.raises(OutOfBoundsError, match=r"A\[4\]"):
        evaluate(out, {"A": rand(4)})


# ---- chunking ------------------------------------------------------------------------------


def matmul_dag(m: int, n: int, k: int, reducer=te.sum):
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    return a, b, te.compute((m, n), lambda i, j: reducer(a[i, r] * b[r, j], axis=r), name="C")


@pytest.mark.parametrize("limit", [1 << 30, 4096, 100, 1])
def test_chunked_sum_matches_unchunked(limit):
    a, b, c = matmul_dag(24, 20, 64)
    x, y = rand(24, 64), rand(64, 20)
    got = evaluate(c, {"A": x, "B": y}, max_block_elems=limit, contractions=False)["C"]
    want = (x.astype("float64") @ y.astype("float64")).astype("float32")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("limit", [100, 1000, 5000])
def test_blocks_stay_within_the_limit(monkeypatch, limit):
    import autosched.task.evaluate as ev

    sizes = []
    block = ev._eval_block

    def recording(op, s_ranges, r_ranges, load):
        sizes.append(np.prod([hi - lo for lo, hi in list(s_ranges) + list(r_ranges)]))
        return block(op, s_ranges, r_ranges, load)

    monkeypatch.setattr(ev, "_eval_block", recording)
    _, _, c = matmul_dag(24, 20, 64)
    evaluate(c, {"A": rand(24, 64), "B": rand(64, 20)}, max_block_elems=limit, contractions=False)
    assert len(sizes) > 1 and max(sizes) <= limit and sum(sizes) == 24 * 20 * 64


@pytest.mark.parametrize("limit", [1 << 30, 333, 7])
def test_chunked_max_and_custom_reducers(limit):
    x, y = rand(9, 33), rand(33, 5)
    prods = x[:, :, None] * y[None, :, :]
    _, _, c = matmul_dag(9, 5, 33, te.max)
    np.testing.assert_array_equal(
        evaluate(c, {"A": x, "B": y}, max_block_elems=limit)["C"], prods.max(axis=1)
    )
    absmax = te.comm_reducer(lambda p, q: te.max(te.abs(p), te.abs(q)), lambda d: 0.0, "absmax")
    _, _, c = matmul_dag(9, 5, 33, absmax)
    np.testing.assert_array_equal(
        evaluate(c, {"A": x, "B": y}, max_block_elems=limit)["C"], np.abs(prods).max(axis=1)
    )


def test_chunked_elementwise_and_default_large_reduction():
    a = te.placeholder((50, 40), name="A")
    out = te.compute((50, 40), lambda i, j: a[i, j] * 2.0, name="twice")
    x = rand(50, 40)
    np.testing.assert_array_equal(evaluate(out, {"A": x}, max_block_elems=64)["twice"], x * 2)
    # 64 x 64 x 2048 = 2^23 points: above the default block size, so chunked by default.
    a, b, c = matmul_dag(64, 64, 2048)
    x, y = rand(64, 2048), rand(2048, 64)
    got = evaluate(c, {"A": x, "B": y}, contractions=False)["C"]
    want = (x.astype("float64") @ y.astype("float64")).astype("float32")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---- contractions by einsum ------------------------------------------------------------------


def _no_elementwise(monkeypatch):
    """Make the elementwise path fail for reductions: what still evaluates went through einsum."""
    import autosched.task.evaluate as ev

    block = ev._eval_block

    def refuse(op, s_ranges, r_ranges, load):
        assert not op.reduce_axis, f"{op.name} was evaluated elementwise"
        return block(op, s_ranges, r_ranges, load)

    monkeypatch.setattr(ev, "_eval_block", refuse)


def test_suite_contractions_go_through_einsum_and_match_elementwise(monkeypatch):
    """matmul, dense, batch matmul, conv2d (stride 1 and 2) and depthwise conv2d, at reduced
    sizes: the einsum path gives the elementwise result (to float32 rounding)."""
    from autosched.task.workload_registry import lookup
    from autosched.task.workloads import SUITE
    from autosched.te.tensor import PlaceholderOp

    for name in (
        "matmul",
        "dense_bias",
        "batch_matmul",
        "conv2d_bias_relu",
        "conv2d_7x7s2",
        "depthwise",
    ):
        workload, _, reduced = SUITE[name]
        dag = ComputeDAG(lookup(workload)(*reduced))
        rng = np.random.default_rng(1)
        inputs = {
            t.name: rng.uniform(-1, 1, t.shape).astype(t.dtype)
            for t in dag.tensors
            if isinstance(t.op, PlaceholderOp)
        }
        slow = evaluate(dag.tensors, inputs, contractions=False)
        with monkeypatch.context() as m:
            _no_elementwise(m)
            fast = evaluate(dag.tensors, inputs)
        for key, want in slow.items():
            scale = np.abs(want).max()
            np.testing.assert_allclose(
                fast[key], want, rtol=0, atol=1e-6 * scale, err_msg=f"{name} {key}"
            )


def test_contraction_with_strides_offsets_and_repeated_axes(monkeypatch):
    """Index coefficients (stride 2), a reduce axis starting at 1, an axis used twice in one
    index (a[i, i + k]) and a negative coefficient, against numpy loops."""
    a = te.placeholder((5, 12), name="A")
    b = te.placeholder((8,), name="B")
    k = te.reduce_axis((1, 4), name="k")
    out = te.compute(
        (4,), lambda i: te.sum(a[i, i + 2 * k] * b[7 - k] * a[i + 1, k], axis=k), name="o"
    )
    x, y = rand(5, 12), rand(8)
    want = [
        sum(np.float64(x[i, i + 2 * kk]) * y[7 - kk] * x[i + 1, kk] for kk in range(1, 4))
        for i in range(4)
    ]
    _no_elementwise(monkeypatch)
    np.testing.assert_allclose(evaluate(out, {"A": x, "B": y})["o"], want, rtol=1e-6)


def test_other_reductions_fall_back_to_elementwise():
    """Not affine (a[i // 2, k]), conditional, not a product (a + b), max: elementwise."""
    from autosched.task.evaluate import _eval_contraction

    a = te.placeholder((6, 8), name="A")
    b = te.placeholder((8,), name="B")
    k = te.reduce_axis((0, 8), name="k")
    cases = [
        te.compute((6,), lambda i: te.sum(a[i // 2, k] * b[k], axis=k), name="nonaffine"),
        te.compute((6,), lambda i: te.sum(a[i, k] * b[k], axis=k, where=k < i), name="cond"),
        te.compute((6,), lambda i: te.sum(a[i, k] + b[k], axis=k), name="add"),
        te.compute((6,), lambda i: te.max(a[i, k] * b[k], axis=k), name="max"),
    ]
    x, y = rand(6, 8), rand(8)
    for out in cases:
        arrays = {op: arr for op, arr in evaluate_ops(out, {"A": x, "B": y}).items()}
        assert _eval_contraction(out.op, arrays) is None, out.op.name


# ---- inputs and outputs --------------------------------------------------------------------


def test_missing_input_is_named():
    a, b, c = matmul_dag(2, 3, 4)
    with pytest.raises(MissingInputError, match="'B'") as info:
        evaluate(c, {"A": rand(2, 4)})
    assert isinstance(info.value, KeyError)


def test_input_shape_and_dtype_mismatch():
    a, b, c = matmul_dag(2, 3, 4)
    with pytest.raises(InputMismatchError, match="shape"):
        evaluate(c, {"A": rand(2, 4), "B": rand(3, 4)})
    with pytest.raises(InputMismatchError, match="dtype"):
        evaluate(c, {"A": rand(2, 4), "B": rand(4, 3).astype("float64")})


def test_order_names_and_dag_input():
    a = te.placeholder((3,), name="A")
    r1 = te.compute((3,), lambda i: te.max(a[i], 0.0), name="compute")
    r2 = te.compute((3,), lambda i: r1[i] * 2.0, name="compute")
    assert [op.name for op in topo_ops([a, r2])] == ["A", "compute", "compute"]
    x = rand(3)
    got = evaluate(ComputeDAG([a, r2]), {"A": x})
    assert list(got) == ["compute", "compute.1"]
    np.testing.assert_array_equal(got["compute.1"], np.maximum(x, 0) * 2)
    assert set(evaluate_ops(r2, {"A": x})) == {a.op, r1.op, r2.op}
