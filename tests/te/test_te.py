"""The tensor-expression language: printing, structural identity, errors, dtypes, npeval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosched import te
from autosched.errors import DTypeError, IndexCountError, ReduceAxisError, TEError
from autosched.task.evaluate import evaluate_ops
from autosched.te.npeval import OutOfBoundsError, eval_expr, gather


def run(out: te.Tensor, **arrays: np.ndarray) -> np.ndarray:
    return evaluate_ops(out, arrays)[out.op]


# ---- printing ------------------------------------------------------------------------------


def test_repr_in_tvm_style():
    a = te.placeholder((4, 4), name="A")
    yy = te.IterVar("yy", 0, 4, te.IterVar.SPATIAL)
    ry = te.reduce_axis((0, 3), name="ry")
    x = a[yy, ry]
    assert repr(yy + ry) == "(yy + ry)"
    assert repr(yy * 2) == "(yy*2)"
    assert repr(x * x) == "(A[yy, ry]*A[yy, ry])"
    assert repr(te.max(x, 0.0)) == "max(A[yy, ry], 0f)"
    assert repr(te.min(yy, 3)) == "min(yy, 3)"
    assert repr(te.floordiv(yy, 2)) == "floordiv(yy, 2)"
    assert repr(yy % 2) == "floormod(yy, 2)"
    assert repr(te.if_then_else(yy >= 1, x, 0.0)) == "tir.if_then_else((yy >= 1), A[yy, ry], 0f)"
    assert repr(te.all(yy >= 1, yy < 3, ry < 2)) == "(((yy >= 1) && (yy < 3)) && (ry < 2))"
    assert repr(te.exp(x)) == "tir.exp(A[yy, ry])"
    assert repr(te.cast(x, "float16")) == "float16(A[yy, ry])"
    assert repr(te.const(1.5, "float64")) == "1.5f64"
    assert repr(te.const(7, "int64")) == "7i64"
    assert repr(~(yy < 2)) == "!(yy < 2)"


def test_sum_prints_as_reduce():
    a = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    out = te.compute((4,), lambda i: te.sum(a[i, k], axis=k), name="s")
    assert repr(out.op.body) == "reduce(sum, A[i, k], axis=[k])"
    assert [ax.name for ax in out.op.axis] == ["i"]
    assert out.op.reduce_axis == (k,)


# ---- structural identity -------------------------------------------------------------------


def test_structural_hash_and_equality():
    a = te.placeholder((4,), name="A")
    i = te.Var("i")
    e1, e2 = a[i] * 2.0 + 1.0, a[i] * 2.0 + 1.0
    assert e1 is not e2
    assert hash(e1) == hash(e2) and e1.same_as(e2) and bool(e1 == e2)
    assert not bool(e1 != e2)
    table = {e1: "first"}
    assert table[e2] == "first"
    assert e2 in table


def test_different_vars_and_buffers_differ():
    i, j = te.Var("i"), te.Var("i")
    assert not i.same_as(j) and not bool(i == j) and bool(i != j)
    assert len({i + 1: 0, j + 1: 1}) == 2
    a, b = te.placeholder((4,), name="A"), te.placeholder((4,), name="A")
    assert not a[i].same_as(b[i])
    assert not (i + 1).same_as(i + 2)


def test_expression_as_python_bool_raises():
    with pytest.raises(TEError, match="Python bool"):
        bool(te.Var("i") < 3)


# ---- errors --------------------------------------------------------------------------------


def test_wrong_number_of_indices():
    a = te.placeholder((3, 4), name="A")
    with pytest.raises(IndexCountError, match="2 dimensions"):
        a[1]
    with pytest.raises(IndexCountError):
        te.compute((3,), lambda i: a[i, 0, 0])


def test_tensor_is_not_iterable():
    a = te.placeholder((4,), name="A")
    for iterate in (list, tuple, lambda t: [x for x in t], lambda t: dict.fromkeys(t)):
        with pytest.raises(TEError, match="'A' is not iterable: index it") as err:
            iterate(a)
        assert isinstance(err.value, TypeError)  # what Python raises for any non-iterable


def test_constant_index_outside_the_shape():
    a = te.placeholder((4,), name="A")
    b = te.placeholder((2, 3), name="B")
    with pytest.raises(
        TEError, match=r"'A' of shape \[4\] is indexed with 100 on axis 0 of extent 4"
    ):
        a[100]
    with pytest.raises(TEError, match="indexed with -1 on axis 0 .*negative indices"):
        a[-1]
    i = te.Var("i")
    with pytest.raises(TEError, match="indexed with 3 on axis 1 of extent 3"):
        b[i, 3]
    assert repr(a[3]) == "A[3]" and repr(b[1, i]) == "B[1, i]"


def test_reduce_axis_in_non_reduce_compute():
    a = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ReduceAxisError, match="non-reduce"):
        te.compute((3,), lambda i: a[i, k])


def test_nested_reduction():
    a = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ReduceAxisError, match="nested"):
        te.compute((3,), lambda i: te.sum(a[i, k], axis=k) + 1.0)


def test_sum_over_spatial_axis_is_rejected():
    a = te.placeholder((3, 4), name="A")
    with pytest.raises(ReduceAxisError, match="not a reduce axis"):
        te.compute((3,), lambda i: te.sum(a[i, 0], axis=i))


@pytest.mark.parametrize("dtype", ["float8", "int16", "complex64"])
def test_unknown_dtype(dtype):
    with pytest.raises(DTypeError, match="unknown dtype"):
        te.placeholder((2,), dtype=dtype, name="A")


def test_dtype_mismatch_without_cast():
    a = te.placeholder((4,), dtype="float32", name="A")
    b = te.placeholder((4,), dtype="float16", name="B")
    with pytest.raises(DTypeError, match="mismatch"):
        te.compute((4,), lambda i: a[i] + b[i])
    out = te.compute((4,), lambda i: a[i] + te.cast(b[i], "float32"))  # fine with a cast
    assert out.dtype == "float32"
    with pytest.raises(DTypeError):
        te.compute((4,), lambda i: te.placeholder((4,), "int32", "C")[i] + 0.5)


def test_integer_true_division_is_rejected():
    i = te.Var("i")
    with pytest.raises(DTypeError, match="floordiv"):
        i / 2


def test_fcompute_arity_mismatch():
    with pytest.raises(TEError, match="fcompute takes 1"):
        te.compute((3, 4), lambda i: i)


def test_bad_shapes_and_ranges():
    with pytest.raises(TEError):
        te.placeholder((3, 0), name="A")
    with pytest.raises(TEError):
        te.reduce_axis((4, 4), name="k")


# ---- reducers and dtypes in the evaluator --------------------------------------------------


def test_comm_reducer_product():
    prod = te.comm_reducer(lambda x, y: x * y, lambda dtype: 1, name="prod")
    a = te.placeholder((3, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    out = te.compute((3,), lambda i: prod(a[i, k], axis=k), name="P")
    v = np.random.default_rng(1).uniform(0.5, 1.5, (3, 5)).astype("float32")
    np.testing.assert_allclose(run(out, A=v), v.prod(axis=1), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
def test_dtypes_evaluate_in_their_type(dtype):
    a = te.placeholder((4, 6), dtype=dtype, name="A")
    k = te.reduce_axis((0, 6), name="k")
    twice = te.compute((4, 6), lambda i, j: a[i, j] + a[i, j], name="twice")
    total = te.compute((4,), lambda i: te.sum(twice[i, k], axis=k), name="total")
    v = np.arange(24).reshape(4, 6).astype(dtype)
    got = evaluate_ops(total, {"A": v})
    assert got[twice.op].dtype == np.dtype(dtype)
    assert got[total.op].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got[total.op], (2 * v).sum(axis=1).astype(dtype))


def test_bool_and_casts():
    a = te.placeholder((6,), dtype="float32", name="A")
    pos = te.compute((6,), lambda i: a[i] > 0.0, name="pos")
    as_int = te.compute((6,), lambda i: te.cast(pos[i], "int32") * 3, name="as_int")
    back = te.compute(
        (6,), lambda i: te.cast(as_int[i], "float16") + te.const(0.5, "float16"), name="back"
    )
    trunc = te.compute((6,), lambda i: te.cast(a[i], "int64"), name="trunc")
    v = np.array([-2.7, -0.5, 0.0, 0.5, 1.5, 2.9], "float32")
    got = evaluate_ops([back, trunc], {"A": v})
    assert got[pos.op].dtype == np.bool_
    np.testing.assert_array_equal(got[pos.op], v > 0)
    np.testing.assert_array_equal(got[as_int.op], (v > 0).astype("int32") * 3)
    assert got[back.op].dtype == np.float16
    np.testing.assert_array_equal(got[back.op], ((v > 0) * 3 + 0.5).astype("float16"))
    np.testing.assert_array_equal(got[trunc.op], v.astype("int64"))


def test_logic_ops_on_bools():
    a = te.placeholder((5,), dtype="bool", name="A")
    b = te.placeholder((5,), dtype="bool", name="B")
    out = te.compute((5,), lambda i: (a[i] & ~b[i]) | (b[i] & ~a[i]), name="xor")
    x = np.array([0, 1, 0, 1, 1], bool)
    y = np.array([0, 0, 1, 1, 0], bool)
    np.testing.assert_array_equal(run(out, A=x, B=y), x ^ y)


# ---- npeval directly -----------------------------------------------------------------------


def no_load(node, indices, mask):
    raise AssertionError("no loads expected")


def test_floor_semantics_of_div_and_mod():
    i = te.Var("i")
    vals = np.arange(-7, 8)
    env = {id(i): vals}
    np.testing.assert_array_equal(eval_expr(te.floordiv(i, 3), env, no_load), vals // 3)
    np.testing.assert_array_equal(eval_expr(i % 3, env, no_load), vals % 3)
    np.testing.assert_array_equal(eval_expr(te.max(i, 2), env, no_load), np.maximum(vals, 2))


MATH = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda v: 1 / np.sqrt(v),
    "tanh": np.tanh,
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "erf": np.vectorize(math.erf),
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
}


@pytest.mark.parametrize("name", list(MATH))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_calls(name, dtype):
    x = te.Var("x", dtype)
    v = np.linspace(0.1, 3.0, 11).astype(dtype)
    got = eval_expr(te.call(name, x), {id(x): v}, no_load)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, MATH[name](v.astype("float64")), rtol=2e-6)


def test_pow_and_float16_results():
    x = te.Var("x", "float16")
    v = np.array([0.5, 1.0, 2.0], "float16")
    got = eval_expr(te.pow(x, 2.0) * te.exp(x), {id(x): v}, no_load)
    assert got.dtype == np.float16
    np.testing.assert_allclose(
        got, v.astype("float64") ** 2 * np.exp(v.astype("float64")), rtol=2e-3
    )


def test_select_masks_the_untaken_side():
    a = te.placeholder((5,), name="A")
    i = te.Var("i")
    guarded = te.if_then_else(te.all(i >= 1, i < 6), a[i - 1], -1.0)
    data = np.arange(5, dtype="float32")

    def load(node, indices, mask):
        return gather(data, indices, mask, node.buffer.name)

    got = eval_expr(guarded, {id(i): np.arange(0, 7)}, load)
    np.testing.assert_array_equal(got, [-1, 0, 1, 2, 3, 4, -1])
    with pytest.raises(OutOfBoundsError, match=r"A\[5\]"):
        eval_expr(a[i - 1], {id(i): np.arange(0, 7)}, load, mask=np.arange(0, 7) >= 1)


def test_reduce_is_not_evaluated_by_npeval():
    a = te.placeholder((4,), name="A")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(TEError, match="reductions"):
        eval_expr(te.sum(a[k], axis=k), {}, no_load)
