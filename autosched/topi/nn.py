"""`topi.nn`: the neural-network operators, gathered from their family modules (TVM's layout)."""

from autosched.topi.conv import (
    conv2d_nchw,
    conv2d_nhwc,
    conv3d_ncdhw,
    depthwise_conv2d_nchw,
    group_conv2d_nchw,
)
from autosched.topi.conv_transpose import conv2d_transpose_nchw
from autosched.topi.dense import batch_matmul, bias_add, dense, matmul
from autosched.topi.elemwise import cast, relu
from autosched.topi.pad import dilate, pad
from autosched.topi.pooling import avg_pool2d, max_pool2d, pool2d
from autosched.topi.reduction import layer_norm, norm2d, softmax

__all__ = [
    "conv2d_nchw",
    "conv2d_nhwc",
    "conv3d_ncdhw",
    "depthwise_conv2d_nchw",
    "group_conv2d_nchw",
    "conv2d_transpose_nchw",
    "batch_matmul",
    "bias_add",
    "dense",
    "matmul",
    "cast",
    "relu",
    "dilate",
    "pad",
    "avg_pool2d",
    "max_pool2d",
    "pool2d",
    "layer_norm",
    "norm2d",
    "softmax",
]
