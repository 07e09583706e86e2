"""The operator library: each operator built from te, with TVM's op names, tags and axis names.

Use it as `topi.nn.conv2d_nchw(...)` or flat as `topi.conv2d_nchw(...)`; `topi.testing` holds
numpy references of every operator, independent of the expression language.
"""

from autosched.topi import broadcast, nn, testing
from autosched.topi.broadcast import add, divide, maximum, minimum, multiply, subtract
from autosched.topi.nn import (
    avg_pool2d,
    batch_matmul,
    bias_add,
    cast,
    conv2d_nchw,
    conv2d_nhwc,
    conv2d_transpose_nchw,
    conv3d_ncdhw,
    dense,
    depthwise_conv2d_nchw,
    dilate,
    group_conv2d_nchw,
    layer_norm,
    matmul,
    max_pool2d,
    norm2d,
    pad,
    pool2d,
    relu,
    softmax,
)

__all__ = [
    "broadcast",
    "nn",
    "testing",
    "add",
    "divide",
    "maximum",
    "minimum",
    "multiply",
    "subtract",
    "avg_pool2d",
    "batch_matmul",
    "bias_add",
    "cast",
    "conv2d_nchw",
    "conv2d_nhwc",
    "conv2d_transpose_nchw",
    "conv3d_ncdhw",
    "dense",
    "depthwise_conv2d_nchw",
    "dilate",
    "group_conv2d_nchw",
    "layer_norm",
    "matmul",
    "max_pool2d",
    "norm2d",
    "pad",
    "pool2d",
    "relu",
    "softmax",
]
