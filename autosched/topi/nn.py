"""`topi.nn`: the neural-network operators, gathered from their family modules (TVM's layout)."""

from .conv import (
    conv2d_nchw, conv2d_nhwc, conv3d_ncdhw, depthwise_conv2d_nchw, group_conv2d_nchw,
)
from .conv_transpose import conv2d_transpose_nchw
from .dense import batch_matmul, bias_add, dense, matmul
from .elemwise import relu
from .pad import dilate, pad
from .pooling import avg_pool2d, max_pool2d, pool2d
from .reduction import layer_norm, norm2d, softmax

__all__ = [
    "conv2d_nchw", "conv2d_nhwc", "conv3d_ncdhw", "depthwise_conv2d_nchw", "group_conv2d_nchw",
    "conv2d_transpose_nchw", "batch_matmul", "bias_add", "dense", "matmul", "relu", "dilate",
    "pad", "avg_pool2d", "max_pool2d", "pool2d", "layer_norm", "norm2d", "softmax",
]
