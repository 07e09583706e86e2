"""Every topi operator, evaluated by autosched.task.evaluate, against its numpy reference
(conv2d_transpose_nchw: test_topi_conv_transpose.py)."""

from __future__ import annotations

import numpy as np
import pytest

from autosched import te, topi
from autosched.errors import DTypeError, TEError
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.evaluate import evaluate, evaluate_ops
from autosched.topi import testing as ref

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def run(out: te.Tensor, **arrays: np.ndarray) -> np.ndarray:
    """Evaluate `out` with the placeholders bound by name, after building its DAG (which proves
    every read in bounds: no topi operator may be rejected)."""
    ComputeDAG([out])
    return evaluate_ops(out, arrays)[out.op]


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# ---- the seed's conv2d layer ----------------------------------------------------------------

SEED_BODIES = {
    "pad_temp": "tir.if_then_else(((((i2 >= 1) && (i2 < 8)) && (i3 >= 1)) && (i3 < 8)), "
    "data[i0, i1, (i2 - 1), (i3 - 1)], 0f)",
    "conv2d_nchw": "(pad_temp[nn, rc, (yy + ry), (xx + rx)]*kernel[ff, rc, ry, rx])",
    "T_add": "(conv2d_nchw[ax0, ax1, ax2, ax3] + bias[ax0, ax1, 0, 0])",
    "compute": "max(T_add[i0, i1, i2, i3], 0f)",
}


def conv_layer(n, h, w, co, ci, kh, kw, stride, padding):
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    bias = te.placeholder((1, co, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = topi.nn.relu(conv + bias)
    return [data, kernel, bias, out]


def test_seed_dag_bodies_print_like_tvm():
    data, kernel, bias, out = conv_layer(1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
    relu = out.op
    t_add = relu.input_tensors[0].op
    conv = t_add.input_tensors[0].op
    pad = conv.input_tensors[0].op
    assert [op.name for op in (pad, conv, t_add, relu)] == list(SEED_BODIES)
    assert [a.name for a in conv.axis] == ["nn", "ff", "yy", "xx"]
    assert [a.name for a in conv.reduce_axis] == ["rc", "ry", "rx"]
    for op in (pad, conv, t_add, relu):
        body = op.body.source if op.reduce_axis else op.body
        assert repr(body) == SEED_BODIES[op.name]
    assert [a.name for a in t_add.axis] == ["ax0", "ax1", "ax2", "ax3"]


SEED_DAG = """\
data = PLACEHOLDER [1, 512, 7, 7]
pad_temp(i0, i1, i2, i3) = tir.if_then_else(((((i2 >= 1) && (i2 < 8)) && (i3 >= 1)) && (i3 < 8)), \
data[i0, i1, (i2 - 1), (i3 - 1)], 0f)
kernel = PLACEHOLDER [512, 512, 3, 3]
conv2d_nchw(nn, ff, yy, xx) += (pad_temp[nn, rc, (yy + ry), (xx + rx)]*kernel[ff, rc, ry, rx])
bias = PLACEHOLDER [1, 512, 1, 1]
T_add(ax0, ax1, ax2, ax3) = (conv2d_nchw[ax0, ax1, ax2, ax3] + bias[ax0, ax1, 0, 0])
compute(i0, i1, i2, i3) = max(T_add[i0, i1, i2, i3], 0f)"""


def test_seed_dag_text():
    from autosched.schedule.compute_dag import ComputeDAG

    dag = ComputeDAG(conv_layer(1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)))
    assert str(dag).strip() == SEED_DAG


def test_seed_layer_small_evaluates():
    tensors = conv_layer(1, 7, 7, 8, 4, 3, 3, (1, 1), (1, 1))
    a, w, b = rand(1, 4, 7, 7), rand(8, 4, 3, 3), rand(1, 8, 1, 1)
    got = evaluate(tensors, {"data": a, "kernel": w, "bias": b})
    assert list(got) == ["pad_temp", "conv2d_nchw", "T_add", "compute"]
    want = ref.relu(ref.bias_add(ref.conv2d_nchw_python(a, w, 1, 1), b.reshape(8)))
    close(got["compute"], want)


def test_conv_without_padding_reads_data_directly():
    data = te.placeholder((1, 2, 5, 5), name="data")
    kernel = te.placeholder((3, 2, 3, 3), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 2, 0, dilation=2)
    assert conv.op.input_tensors[0] is data
    assert repr(conv.op.body.source) == (
        "(data[nn, rc, ((yy*2) + (ry*2)), ((xx*2) + (rx*2))]*kernel[ff, rc, ry, rx])"
    )


# ---- convolutions --------------------------------------------------------------------------

CONV2D_CASES = [  # (N, CI, H, W, CO, KH, KW, stride, padding, dilation)
    (1, 3, 7, 7, 4, 3, 3, 1, 1, 1),
    (2, 4, 9, 8, 5, 3, 3, 2, 1, 1),
    (1, 3, 10, 10, 2, 3, 3, 1, 2, 2),
    (1, 2, 8, 9, 3, 3, 2, (2, 1), (1, 0, 2, 1), (1, 2)),
    (1, 2, 6, 6, 2, 1, 1, 1, 0, 1),
    (1, 2, 7, 7, 3, 3, 3, 1, "SAME", 1),
]


@pytest.mark.parametrize("case", CONV2D_CASES)
def test_conv2d_nchw(case):
    n, ci, h, w, co, kh, kw, stride, padding, dilation = case
    data = te.placeholder((n, ci, h, w), name="data")
    kernel = te.placeholder((co, ci, kh, kw), name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation)
    a, k = rand(n, ci, h, w), rand(co, ci, kh, kw)
    close(run(out, data=a, kernel=k), ref.conv2d_nchw_python(a, k, stride, padding, dilation))


@pytest.mark.parametrize("case", CONV2D_CASES[:4])
def test_conv2d_nhwc(case):
    n, ci, h, w, co, kh, kw, stride, padding, dilation = case
    data = te.placeholder((n, h, w, ci), name="data")
    kernel = te.placeholder((kh, kw, ci, co), name="kernel")
    out = topi.nn.conv2d_nhwc(data, kernel, stride, padding, dilation)
    assert out.op.name == "Conv2dOutput"
    a, k = rand(n, h, w, ci), rand(kh, kw, ci, co)
    close(run(out, data=a, kernel=k), ref.conv2d_nhwc_python(a, k, stride, padding, dilation))


@pytest.mark.parametrize("mult,stride,padding,dilation", [(1, 1, 1, 1), (2, 2, 1, 1), (3, 1, 2, 2)])
def test_depthwise_conv2d_nchw(mult, stride, padding, dilation):
    data = te.placeholder((2, 4, 8, 8), name="data")
    kernel = te.placeholder((4, mult, 3, 3), name="kernel")
    out = topi.nn.depthwise_conv2d_nchw(data, kernel, stride, padding, dilation)
    assert out.op.name == "DepthwiseConv2d" and out.shape[1] == 4 * mult
    a, k = rand(2, 4, 8, 8), rand(4, mult, 3, 3)
    want = ref.depthwise_conv2d_nchw_python(a, k, stride, padding, dilation)
    close(run(out, data=a, kernel=k), want)


@pytest.mark.parametrize("groups,stride,padding", [(1, 1, 1), (2, 1, 1), (4, 2, 0), (2, 2, (1, 2))])
def test_group_conv2d_nchw(groups, stride, padding):
    data = te.placeholder((1, 8, 7, 7), name="data")
    kernel = te.placeholder((4, 8 // groups, 3, 3), name="kernel")
    out = topi.nn.group_conv2d_nchw(data, kernel, stride, padding, 1, groups)
    a, k = rand(1, 8, 7, 7), rand(4, 8 // groups, 3, 3)
    want = ref.group_conv2d_nchw_python(a, k, stride, padding, 1, groups)
    close(run(out, data=a, kernel=k), want)


@pytest.mark.parametrize("stride,padding,dilation", [(1, 1, 1), (2, (1, 0, 1), 1), (1, 0, 2)])
def test_conv3d_ncdhw(stride, padding, dilation):
    data = te.placeholder((1, 2, 6, 6, 5), name="data")
    kernel = te.placeholder((3, 2, 3, 2, 3), name="kernel")
    out = topi.nn.conv3d_ncdhw(data, kernel, stride, padding, dilation)
    a, k = rand(1, 2, 6, 6, 5), rand(3, 2, 3, 2, 3)
    close(run(out, data=a, kernel=k), ref.conv3d_ncdhw_python(a, k, stride, padding, dilation))


def test_conv2d_float16_input_float32_output():
    data = te.placeholder((1, 2, 5, 5), dtype="float16", name="data")
    kernel = te.placeholder((2, 2, 3, 3), dtype="float16", name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, 1, 1, out_dtype="float32")
    assert out.dtype == "float32"
    assert "float32(pad_temp[" in repr(out.op.body.source)
    a, k = rand(1, 2, 5, 5, dtype="float16"), rand(2, 2, 3, 3, dtype="float16")
    want = ref.conv2d_nchw_python(a.astype("float32"), k.astype("float32"), 1, 1)
    close(run(out, data=a, kernel=k), want)


def test_conv2d_on_integers():
    data = te.placeholder((1, 2, 5, 5), dtype="int32", name="data")
    kernel = te.placeholder((3, 2, 3, 3), dtype="int32", name="kernel")
    out = topi.nn.conv2d_nchw(data, kernel, 1, 1, out_dtype="int32")
    assert repr(out.op.input_tensors[0].op.body).endswith(", 0)")
    a = RNG.integers(-5, 5, (1, 2, 5, 5)).astype("int32")
    k = RNG.integers(-5, 5, (3, 2, 3, 3)).astype("int32")
    np.testing.assert_array_equal(run(out, data=a, kernel=k), ref.conv2d_nchw_python(a, k, 1, 1))


# ---- dense / matmul ------------------------------------------------------------------------


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul(ta, tb):
    a_np, b_np = rand(*((6, 5) if ta else (5, 6))), rand(*((7, 6) if tb else (6, 7)))
    a = te.placeholder(a_np.shape, name="A")
    b = te.placeholder(b_np.shape, name="B")
    out = topi.matmul(a, b, ta, tb)
    assert out.op.name == "T_matmul" and out.shape == (5, 7)
    close(run(out, A=a_np, B=b_np), ref.matmul(a_np, b_np, ta, tb))


@pytest.mark.parametrize("with_bias", [False, True])
def test_dense(with_bias):
    data = te.placeholder((4, 6), name="data")
    weight = te.placeholder((3, 6), name="weight")
    bias = te.placeholder((3,), name="bias") if with_bias else None
    out = topi.nn.dense(data, weight, bias)
    a, w, b = rand(4, 6), rand(3, 6), rand(3)
    arrays = {"data": a, "weight": w, "bias": b} if with_bias else {"data": a, "weight": w}
    assert out.op.name == ("T_add" if with_bias else "T_dense")
    close(run(out, **arrays), ref.dense(a, w, b if with_bias else None))


@pytest.mark.parametrize(
    "ta,tb,ba,bb",
    [(False, True, 3, 3), (False, False, 3, 3), (True, True, 1, 3), (True, False, 2, 1)],
)
def test_batch_matmul(ta, tb, ba, bb):
    m, n, k = 4, 5, 6
    a_np = rand(*((ba, k, m) if ta else (ba, m, k)))
    b_np = rand(*((bb, n, k) if tb else (bb, k, n)))
    a = te.placeholder(a_np.shape, name="A")
    b = te.placeholder(b_np.shape, name="B")
    out = topi.nn.batch_matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert out.shape == (max(ba, bb), m, n)
    close(run(out, A=a_np, B=b_np), ref.batch_matmul(a_np, b_np, ta, tb))


def test_batch_matmul_default_is_nt():
    a = te.placeholder((2, 3, 4), name="A")
    b = te.placeholder((2, 5, 4), name="B")
    out = topi.batch_matmul(a, b)
    assert out.op.name == "T_batch_matmul_NT"
    assert [ax.name for ax in out.op.axis] == ["b", "i", "j"]


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_bias_add(axis):
    data = te.placeholder((2, 3, 4), name="data")
    bias = te.placeholder((data.shape[axis],), name="bias")
    out = topi.nn.bias_add(data, bias, axis)
    a, b = rand(2, 3, 4), rand(data.shape[axis])
    close(run(out, data=a, bias=b), ref.bias_add(a, b, axis % 3))


# ---- broadcast and elementwise -------------------------------------------------------------

BROADCAST_SHAPES = [
    ((2, 3, 4), (2, 3, 4)),
    ((2, 3, 4), (1, 3, 1)),
    ((4,), (2, 3, 4)),
    ((2, 1, 4), (3, 1)),
    ((1,), (1,)),
]


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide"])
@pytest.mark.parametrize("sa,sb", BROADCAST_SHAPES)
def test_broadcast_binary(name, sa, sb):
    a, b = te.placeholder(sa, name="a"), te.placeholder(sb, name="b")
    out = getattr(topi.broadcast, name)(a, b)
    assert out.op.name == f"T_{name}"
    x, y = rand(*sa), rand(*sb) + 2.0
    want = getattr(np, name)(x, y)
    close(run(out, a=x, b=y), want)


@pytest.mark.parametrize(
    "op,fn", [("+", np.add), ("-", np.subtract), ("*", np.multiply), ("/", np.divide)]
)
def test_tensor_operators_and_scalars(op, fn):
    a = te.placeholder((3, 4), name="a")
    x = rand(3, 4)
    out = {"+": lambda: a + 2.0, "-": lambda: a - 2.0, "*": lambda: a * 2.0, "/": lambda: a / 2.0}[
        op
    ]()
    close(run(out, a=x), fn(x, np.float32(2.0)))
    rev = {"+": lambda: 2.0 + a, "-": lambda: 2.0 - a, "*": lambda: 2.0 * a, "/": lambda: 2.0 / a}[
        op
    ]()
    close(run(rev, a=x), fn(np.float32(2.0), x))
    assert repr(rev.op.body) == f"(2f {op} a[ax0, ax1])".replace(" * ", "*")


def test_broadcast_errors():
    a, b = te.placeholder((2, 3), name="a"), te.placeholder((4,), name="b")
    with pytest.raises(TEError, match="cannot be broadcast"):
        topi.add(a, b)
    with pytest.raises(DTypeError):
        topi.add(a, te.placeholder((2, 3), dtype="int32", name="c"))
    with pytest.raises(TEError, match="at least one operand"):
        topi.add(1.0, 2.0)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 2, 3, 3)])
def test_relu(shape):
    x = te.placeholder(shape, name="x")
    out = topi.nn.relu(x)
    assert out.op.name == "compute"
    v = rand(*shape)
    close(run(out, x=v), ref.relu(v))


def test_pad_and_dilate():
    x = te.placeholder((2, 3), name="x")
    out = topi.nn.pad(x, (0, 2), (1, 0), 5.0)
    assert repr(out.op.body) == "tir.if_then_else(((i0 < 2) && (i1 >= 2)), x[i0, (i1 - 2)], 5f)"
    v = rand(2, 3)
    close(run(out, x=v), np.pad(v, ((0, 1), (2, 0)), constant_values=5.0))
    d = topi.nn.dilate(x, (2, 1))
    want = np.zeros((3, 3), np.float32)
    want[::2] = v
    close(run(d, x=v), want)


# ---- reductions ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape,axis", [((4, 10), -1), ((3, 5, 6), 1), ((7,), 0)])
def test_softmax(shape, axis):
    x = te.placeholder(shape, name="x")
    out = topi.nn.softmax(x, axis)
    assert out.op.name == "T_softmax_norm"
    names = [op.name for op in evaluate_ops(out, {"x": rand(*shape)})]
    assert names == [
        "x",
        "T_softmax_maxelem",
        "T_softmax_exp",
        "T_softmax_expsum",
        "T_softmax_norm",
    ]
    v = rand(*shape) * 4
    close(run(out, x=v), ref.softmax_python(v, axis))


@pytest.mark.parametrize("moments", [False, True])
@pytest.mark.parametrize(
    "shape,axis", [((4, 16), -1), ((2, 3, 8), (1, 2)), ((3, 4, 5), 1), ((6,), 0)]
)
def test_layer_norm(shape, axis, moments):
    """Both forms of the statistics (the centred variance after the mean, or the two moments
    in one reduction) give numpy's layer norm."""
    axes = (axis,) if isinstance(axis, int) else axis
    gshape = tuple(shape[a] for a in axes)
    x = te.placeholder(shape, name="x")
    g, b = te.placeholder(gshape, name="gamma"), te.placeholder(gshape, name="beta")
    out = topi.nn.layer_norm(x, g, b, axis, 1e-5, moments=moments)
    stats = [t.name for t in out.op.input_tensors if t.name.startswith("T_layer_norm")]
    expected = ["T_layer_norm_moments"] if moments else ["T_layer_norm_mean", "T_layer_norm_var"]
    assert sorted(set(stats)) == expected
    v, gv, bv = rand(*shape) * 3 + 1, rand(*gshape), rand(*gshape)
    close(
        run(out, x=v, gamma=gv, beta=bv),
        ref.layer_norm_python(v, gv, bv, axis, 1e-5),
        rtol=1e-5,
        atol=1e-5,
    )


POOL_CASES = [  # kernel, stride, padding, dilation, count_include_pad, layout
    (2, 2, 0, 1, True, "NCHW"),
    (3, 1, 1, 1, True, "NCHW"),
    (3, 2, 1, 1, False, "NCHW"),
    ((3, 2), (1, 2), (1, 0, 2, 1), 1, False, "NCHW"),
    (2, 1, 1, 2, False, "NCHW"),
    (3, 2, 1, 1, True, "NHWC"),
]


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("kernel,stride,padding,dilation,include,layout", POOL_CASES)
def test_pool2d(pool_type, kernel, stride, padding, dilation, include, layout):
    shape = (2, 3, 7, 8) if layout == "NCHW" else (2, 7, 8, 3)
    x = te.placeholder(shape, name="x")
    out = topi.nn.pool2d(
        x, kernel, stride, dilation, padding, pool_type, layout=layout, count_include_pad=include
    )
    assert out.op.name == ("pool_max" if pool_type == "max" else "pool_avg")
    v = rand(*shape)
    want = ref.pool2d_python(v, kernel, stride, padding, pool_type, dilation, layout, include)
    close(run(out, x=v), want)


def test_max_and_avg_pool2d_shortcuts():
    x = te.placeholder((1, 2, 6, 6), name="x")
    v = rand(1, 2, 6, 6)
    close(run(topi.nn.max_pool2d(x, 2), x=v), ref.pool2d_python(v, 2, 2, 0, "max"))
    close(run(topi.nn.avg_pool2d(x, 3, 1, 1), x=v), ref.pool2d_python(v, 3, 1, 1, "avg"))


@pytest.mark.parametrize("shape,keepdims", [((5, 6), False), ((2, 3, 4), False), ((2, 3, 4), True)])
def test_norm2d(shape, keepdims):
    x = te.placeholder(shape, name="x")
    out = topi.nn.norm2d(x, keepdims)
    v = rand(*shape)
    close(run(out, x=v), ref.norm2d_python(v, keepdims))


# ---- bad arguments -------------------------------------------------------------------------

BAD_CALLS = {
    "conv channel mismatch": (
        lambda d4, k4: topi.nn.conv2d_nchw(d4((1, 3, 8, 8)), k4((4, 2, 3, 3)), 1, 1),
        "input channels",
    ),
    "conv rank": (
        lambda d4, k4: topi.nn.conv2d_nchw(d4((3, 8, 8)), k4((4, 3, 3, 3)), 1, 1),
        "4 dimensions",
    ),
    "conv window too big": (
        lambda d4, k4: topi.nn.conv2d_nchw(d4((1, 3, 2, 2)), k4((4, 3, 5, 5)), 1, 0),
        "does not fit",
    ),
    "conv bad stride": (
        lambda d4, k4: topi.nn.conv2d_nchw(d4((1, 3, 8, 8)), k4((4, 3, 3, 3)), 0, 1),
        "stride",
    ),
    "matmul inner dim": (lambda d4, k4: topi.matmul(d4((3, 4)), k4((5, 6))), "inner dimensions"),
    "dense features": (lambda d4, k4: topi.nn.dense(d4((3, 4)), k4((5, 6))), "features"),
    "batch_matmul batch": (
        lambda d4, k4: topi.nn.batch_matmul(d4((2, 3, 4)), k4((3, 5, 4))),
        "do not broadcast",
    ),
    "group divisibility": (
        lambda d4, k4: topi.nn.group_conv2d_nchw(d4((1, 6, 8, 8)), k4((4, 3, 3, 3)), 1, 1, 1, 4),
        "groups",
    ),
    "depthwise channels": (
        lambda d4, k4: topi.nn.depthwise_conv2d_nchw(d4((1, 6, 8, 8)), k4((4, 1, 3, 3)), 1, 1),
        "channels",
    ),
    "layer_norm gamma": (
        lambda d4, k4: topi.nn.layer_norm(d4((2, 8)), k4((4,)), k4((8,)), -1),
        "gamma",
    ),
    "pool type": (
        lambda d4, k4: topi.nn.pool2d(d4((1, 1, 4, 4)), 2, 2, 1, 0, "median"),
        "pool_type",
    ),
    "transpose padding": (
        lambda d4, k4: topi.nn.conv2d_transpose_nchw(d4((1, 2, 4, 4)), k4((2, 2, 3, 3)), 1, 3),
        "padding",
    ),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_arguments_raise_teerror(name):
    make, message = BAD_CALLS[name]
    counter = iter(range(100))

    def ph(shape):
        return te.placeholder(shape, name=f"p{next(counter)}")

    with pytest.raises(TEError, match=message):
        make(ph, ph)
