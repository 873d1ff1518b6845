"""TensorFlow "SAME" padding, done explicitly, and the max pool that uses it.

BiT and the hybrid ViTs were trained in TF/JAX with "SAME" padding: when the total padding
is odd, the extra pixel goes after (bottom/right). torch convolutions pad symmetrically, so
timm pads explicitly (``StdConv2dSame``, ``MaxPool2dSame``); so do we, for every backend
to give the same numbers.
"""

import math

from keras import ops


def same_padding(size, kernel_size, stride):
    """``(before, after)`` padding of one side of length ``size``, as TF "SAME" pads it.

    >>> same_padding(64, 7, 2)  # the odd pixel goes after
    (2, 3)
    >>> same_padding(5, 1, 1)
    (0, 0)
    """
    total = max((math.ceil(size / stride) - 1) * stride + kernel_size - size, 0)
    return total // 2, total - total // 2


def conv_output_size(size, kernel_size, stride, padding="same"):
    """Output length of a convolution or pool over ``size`` (``None`` stays ``None``).

    >>> conv_output_size(50, 7, 2), conv_output_size(50, 7, 2, "valid"), conv_output_size(None, 3, 2)
    (25, 22, None)
    """
    if size is None:
        return None
    if padding == "same":
        return math.ceil(size / stride)
    return (size - kernel_size) // stride + 1


def pad_same(x, kernel_size, strides, value=0.0):
    """``(x, padding)``: NHWC ``x`` padded as TF "SAME" would, and the padding left to the op.

    The op's padding is ``"valid"``, except when H or W is unknown (a TF graph traced with
    ``None`` sides): then ``x`` is returned as it is with ``"same"``, TF's native "SAME" being
    the definition that the explicit padding reproduces.

    >>> import numpy as np
    >>> x, padding = pad_same(np.ones((1, 64, 63, 1), "float32"), (7, 7), (2, 2))
    >>> tuple(x.shape), padding
    ((1, 69, 69, 1), 'valid')
    """
    height, width = x.shape[1], x.shape[2]
    if height is None or width is None:
        return x, "same"
    pad_h = same_padding(height, kernel_size[0], strides[0])
    pad_w = same_padding(width, kernel_size[1], strides[1])
    if any(pad_h + pad_w):
        x = ops.pad(x, ((0, 0), pad_h, pad_w, (0, 0)), constant_values=value)
    return x, "valid"


def max_pool_same(x, pool_size=3, strides=2, pad_value=float("-inf")):
    """Max pool of NHWC ``x`` with TF "SAME" padding, as timm's ``MaxPool2dSame``.

    ``pad_value=-inf`` never lets a padded position win, whatever the input. After a ReLU
    (x >= 0) padding with 0 gives the same result exactly, and only a finite pad survives
    full-integer quantisation (LiteRT aborts on -inf).

    >>> import numpy as np
    >>> x = -np.arange(1, 17, dtype="float32").reshape(1, 4, 4, 1)  # all below the 0 pad
    >>> ops.convert_to_numpy(max_pool_same(x)).reshape(2, 2).tolist()
    [[-1.0, -3.0], [-9.0, -11.0]]
    """
    x, padding = pad_same(x, (pool_size, pool_size), (strides, strides), pad_value)
    return ops.max_pool(x, pool_size, strides, padding=padding)


def check_feature_map(shape, owner, what="the input"):
    """Raises a ValueError unless ``shape`` is NHWC with known channels and no empty side.

    >>> check_feature_map((None, 32, 32, 3), "resnet")
    >>> check_feature_map((None, 0, 32, 3), "resnet")
    Traceback (most recent call last):
    ...
    ValueError: resnet: the input has an empty height (0); shape (None, 0, 32, 3) is too small.
    """
    if len(shape) != 4 or shape[-1] is None:
        raise ValueError(
            f"{owner} expects a rank-4 NHWC input (batch, height, width, channels) with known "
            f"channels. Received shape: {tuple(shape)}"
        )
    for side, size in zip(("height", "width"), shape[1:3]):
        if size is not None and size < 1:
            raise ValueError(f"{owner}: {what} has an empty {side} ({size}); shape {tuple(shape)} is too small.")
