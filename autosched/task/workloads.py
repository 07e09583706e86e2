"""The benchmark suite's workloads, registered so that records and the CLI can name them."""

from __future__ import annotations

from autosched import te, topi
from autosched.task.workload_registry import register_workload


@register_workload(name="conv2d_bias_relu")
def conv2d_bias_relu(
    N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: int, padding: int
) -> list[te.Tensor]:
    """The seeds' conv2d + bias + relu layer (NCHW)."""
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = topi.nn.relu(conv + bias)
    return [data, kernel, bias, out]


@register_workload(name="conv2d")
def conv2d(
    N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: int, padding: int
) -> list[te.Tensor]:
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    return [data, kernel, topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1)]


@register_workload(name="matmul")
def matmul(N: int, M: int, K: int) -> list[te.Tensor]:
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((K, M), name="B")
    return [A, B, topi.matmul(A, B)]


@register_workload(name="depthwise_conv2d")
def depthwise_conv2d(
    N: int, C: int, H: int, W: int, KH: int, KW: int, stride: int, padding: int
) -> list[te.Tensor]:
    data = te.placeholder((N, C, H, W), name="data")
    kernel = te.placeholder((C, 1, KH, KW), name="kernel")
    return [data, kernel, topi.nn.depthwise_conv2d_nchw(data, kernel, stride, padding, 1)]


@register_workload(name="batch_matmul")
def batch_matmul(B: int, N: int, M: int, K: int) -> list[te.Tensor]:
    A = te.placeholder((B, N, K), name="A")
    Bt = te.placeholder((B, M, K), name="B")
    return [A, Bt, topi.nn.batch_matmul(A, Bt)]


@register_workload(name="dense_bias")
def dense_bias(N: int, IN: int, OUT: int) -> list[te.Tensor]:
    data = te.placeholder((N, IN), name="data")
    weight = te.placeholder((OUT, IN), name="weight")
    bias = te.placeholder((OUT,), name="bias")
    return [data, weight, bias, topi.nn.dense(data, weight, bias)]


@register_workload(name="softmax")
def softmax(N: int, M: int) -> list[te.Tensor]:
    x = te.placeholder((N, M), name="x")
    return [x, topi.nn.softmax(x, axis=-1)]


# ---- Tensor Core workloads: half-precision operands, float32 accumulation, a cast epilogue --


@register_workload(name="matmul_fp16")
def matmul_fp16(M: int, N: int, K: int) -> list[te.Tensor]:
    """`C = fp16(sum_k f32(A[i, k]) * f32(B[k, j]))`: the fp32 reduction, then a cast stage."""
    A = te.placeholder((M, K), name="A", dtype="float16")
    B = te.placeholder((K, N), name="B", dtype="float16")
    return [A, B, topi.cast(topi.matmul(A, B, out_dtype="float32"), "float16")]


@register_workload(name="batch_matmul_bf16")
def batch_matmul_bf16(B: int, M: int, N: int, K: int) -> list[te.Tensor]:
    """bfloat16 batch_matmul (B given as (batch, N, K), TVM's default), fp32 sums, bf16 out."""
    A = te.placeholder((B, M, K), name="A", dtype="bfloat16")
    Bt = te.placeholder((B, N, K), name="B", dtype="bfloat16")
    return [A, Bt, topi.cast(topi.nn.batch_matmul(A, Bt, out_dtype="float32"), "bfloat16")]


@register_workload(name="batch_matmul_fp16")
def batch_matmul_fp16(B: int, M: int, N: int, K: int) -> list[te.Tensor]:
    """float16 batch_matmul (B given as (batch, N, K): attention scores Q K^T), fp32 sums,
    fp16 out."""
    A = te.placeholder((B, M, K), name="A", dtype="float16")
    Bt = te.placeholder((B, N, K), name="B", dtype="float16")
    return [A, Bt, topi.cast(topi.nn.batch_matmul(A, Bt, out_dtype="float32"), "float16")]


@register_workload(name="conv2d_nhwc_fp16")
def conv2d_nhwc_fp16(
    N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, stride: int, padding: int
) -> list[te.Tensor]:
    """fp16 NHWC conv2d (HWIO kernel), fp32 sums, fp16 output through a cast stage."""
    data = te.placeholder((N, H, W, CI), name="data", dtype="float16")
    kernel = te.placeholder((KH, KW, CI, CO), name="kernel", dtype="float16")
    conv = topi.nn.conv2d_nhwc(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    return [data, kernel, topi.cast(conv, "float16")]


@register_workload(name="conv2d_nchw_fp16")
def conv2d_nchw_fp16(
    N: int, CI: int, H: int, W: int, CO: int, KH: int, KW: int, stride: int, padding: int
) -> list[te.Tensor]:
    """fp16 NCHW conv2d (OIHW kernel), fp32 sums, fp16 output through a cast stage."""
    data = te.placeholder((N, CI, H, W), name="data", dtype="float16")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel", dtype="float16")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    return [data, kernel, topi.cast(conv, "float16")]


@register_workload(name="conv2d_nhwcnc_fp16")
def conv2d_nhwcnc_fp16(
    N: int, H: int, W: int, CO: int, CI: int, KH: int, KW: int, padding: int
) -> list[te.Tensor]:
    """The conv2d of TVM's Tensor Core tutorial, as written there: data in the
    NHWCnc layout (N/16, H, W, CI/16, 16 n, 16 ci), kernel (KH, KW, CI/16, CO/16, 16 ci, 16 co),
    stride 1, fp32 output (N/16, H, W, CO/16, 16 n, 16 co)."""
    bs = 16
    data = te.placeholder((N // bs, H, W, CI // bs, bs, bs), name="A", dtype="float16")
    kernel = te.placeholder((KH, KW, CI // bs, CO // bs, bs, bs), name="W", dtype="float16")
    padded = te.compute(
        (N // bs, H + 2 * padding, W + 2 * padding, CI // bs, bs, bs),
        lambda n, h, w, i, nn, ii: te.if_then_else(
            te.all(h >= padding, h - padding < H, w >= padding, w - padding < W),
            data[n, h - padding, w - padding, i, nn, ii],
            te.const(0.0, "float16"),
        ),
        name="Apad",
    )
    kh = te.reduce_axis((0, KH), name="kh")
    kw = te.reduce_axis((0, KW), name="kw")
    ic = te.reduce_axis((0, CI // bs), name="ic")
    ii = te.reduce_axis((0, bs), name="ii")
    conv = te.compute(
        (N // bs, H, W, CO // bs, bs, bs),
        lambda n, h, w, o, nn, oo: te.sum(
            padded[n, h + kh, w + kw, ic, nn, ii].astype("float32")
            * kernel[kh, kw, ic, o, ii, oo].astype("float32"),
            axis=[ic, kh, kw, ii],
        ),
        name="Conv",
    )
    return [data, kernel, conv]


# The Tensor Core workloads, as SUITE lists workloads (kept apart: SUITE's golden sketches and
# limits are fp32 ones). The full sizes: a square matmul, a bf16 batch_matmul and the
# conv2d of TVM's Tensor Core tutorial.
TENSOR_CORE_SUITE = {
    "matmul_fp16": ("matmul_fp16", (1024, 1024, 1024), (32, 48, 32)),
    "batch_matmul_bf16": ("batch_matmul_bf16", (16, 512, 512, 64), (2, 32, 16, 32)),
    "conv2d_nhwc_fp16": (
        "conv2d_nhwc_fp16",
        (256, 14, 14, 512, 256, 3, 3, 1, 1),
        (16, 4, 4, 32, 16, 3, 3, 1, 1),
    ),
    "conv2d_nchw_fp16": (
        "conv2d_nchw_fp16",
        (256, 256, 14, 14, 512, 3, 3, 1, 1),
        (16, 16, 4, 4, 32, 3, 3, 1, 1),
    ),
    "conv2d_nhwcnc_fp16": (
        "conv2d_nhwcnc_fp16",
        (256, 14, 14, 512, 256, 3, 3, 1),
        (16, 4, 4, 32, 16, 3, 3, 1),
    ),
}

# ResNet-50's convolutions past the stem, as (H = W, CI, CO, kernel, stride, padding) of the
# input: each stage's 1x1 reduce / expand, its 3x3, and the first block's strided 3x3 and 1x1
# projection (v1.5: the stride on the 3x3). With a batch, `conv2d_nhwc_fp16` arguments.
RESNET50_CONVS = (
    (56, 64, 64, 1, 1, 0),
    (56, 64, 64, 3, 1, 1),
    (56, 64, 256, 1, 1, 0),
    (56, 256, 64, 1, 1, 0),
    (56, 256, 128, 1, 1, 0),
    (56, 128, 128, 3, 2, 1),
    (56, 256, 512, 1, 2, 0),
    (28, 128, 128, 3, 1, 1),
    (28, 128, 512, 1, 1, 0),
    (28, 512, 128, 1, 1, 0),
    (28, 256, 256, 3, 2, 1),
    (28, 512, 1024, 1, 2, 0),
    (14, 256, 256, 3, 1, 1),
    (14, 256, 1024, 1, 1, 0),
    (14, 1024, 256, 1, 1, 0),
    (14, 512, 512, 3, 2, 1),
    (14, 1024, 2048, 1, 2, 0),
    (7, 512, 512, 3, 1, 1),
    (7, 512, 2048, 1, 1, 0),
    (7, 2048, 512, 1, 1, 0),
)


def resnet50_conv_args(batch: int, conv: tuple[int, ...]) -> tuple[int, ...]:
    """`conv2d_nhwc_fp16`'s arguments for one of `RESNET50_CONVS` at `batch`."""
    hw, ci, co, k, stride, padding = conv
    return (batch, hw, hw, co, ci, k, k, stride, padding)


# name -> (workload, full-size args, reduced args with the same structure for CPU tests)
SUITE = {
    "matmul": ("matmul", (1024, 1024, 1024), (64, 48, 32)),
    "conv2d_bias_relu": (
        "conv2d_bias_relu",
        (1, 7, 7, 512, 512, 3, 3, 1, 1),
        (1, 7, 7, 16, 8, 3, 3, 1, 1),
    ),
    "conv2d_b16": ("conv2d", (16, 56, 56, 64, 64, 3, 3, 1, 1), (2, 8, 8, 8, 4, 3, 3, 1, 1)),
    "depthwise": ("depthwise_conv2d", (1, 144, 56, 56, 3, 3, 1, 1), (1, 8, 10, 10, 3, 3, 1, 1)),
    "batch_matmul": ("batch_matmul", (12, 128, 128, 64), (2, 16, 16, 8)),
    "dense_bias": ("dense_bias", (1, 784, 128), (1, 48, 16)),
    "softmax": ("softmax", (1024, 1024), (8, 64)),
    "conv2d_7x7s2": ("conv2d", (1, 224, 224, 64, 3, 7, 7, 2, 3), (1, 20, 20, 8, 3, 7, 7, 2, 3)),
}
