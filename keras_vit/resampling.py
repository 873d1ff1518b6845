"""PIL's resampling filters as matrices, for numpy or a Keras backend's ops.

One resize along one axis is a matrix product: ``axis_weights`` builds that matrix as
PIL's ``precompute_coeffs`` does (the filter stretched by the downscale factor when
antialiasing, the window clipped at the borders, each output's weights summing to one).
With antialiasing this is also ``torch.nn.functional.interpolate(..., antialias=True)``,
the kernel timm resamples position embeddings with. Three users: the images' resize in
``ImagePreprocessing``, the position embeddings' resampling in a dynamic-size model, and
the checkpoint converter's antialiased resize (``keras_vit.checkpoints.resample``).

Numpy only here, so that the converter stays free of any backend.
"""

import numpy as np

FILTERS = ("bilinear", "bicubic", "nearest")


def _triangle(xp, t):
    t = xp.abs(t)
    return xp.where(t < 1.0, 1.0 - t, xp.zeros_like(t))


def keys_cubic(xp, t, a=-0.5):
    """Keys' cubic convolution kernel: ``a=-0.5`` in PIL (and torch with antialias),
    ``a=-0.75`` in torch's plain bicubic."""
    t = xp.abs(t)
    near = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    far = (((t - 5.0) * t + 8.0) * t - 4.0) * a
    return xp.where(t < 1.0, near, xp.where(t < 2.0, far, xp.zeros_like(t)))


# PIL's filters (libImaging/Resample.c): the function and its support at scale 1.
_KERNELS = {"bilinear": (_triangle, 1.0), "bicubic": (keys_cubic, 2.0)}


def axis_weights(xp, size, resized, start, count, interpolation, antialias, dtype):
    """The ``(size, count)`` matrix taking an axis of ``size`` pixels to pixels ``start ..
    start + count`` of it resized to ``resized``, as PIL's ``precompute_coeffs`` does.

    ``xp`` is numpy (static sizes) or ``keras.ops`` / a Keras backend's numpy (sizes may be
    integer tensors); Python numbers go into its functions typed, so that they keep
    ``dtype`` on every backend.

    >>> axis_weights(np, 2, 4, 0, 4, "bilinear", True, "float64").T.tolist()  # 2 pixels to 4
    [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]]
    """
    size_f = xp.array(size, dtype)
    scale = size_f / xp.array(resized, dtype)
    centers = (xp.arange(count, dtype=dtype) + xp.array(start, dtype) + 0.5) * scale
    pixels = xp.arange(size, dtype=dtype)[:, None]
    if interpolation == "nearest":
        # The pixel under each center. PIL (ImagingScaleAffine) finds the centers by adding
        # the scale pixel after pixel in float64, whose rounding decides the pixel where a
        # center falls on a boundary: the same sums here when the sizes are known.
        if xp is np:
            centers = np.cumsum(np.where(np.arange(start + count) == 0, 0.5 * scale, scale))[start:]
        return xp.array(pixels == xp.minimum(xp.floor(centers), size_f - 1.0), dtype)
    kernel, support = _KERNELS[interpolation]
    one = xp.array(1.0, dtype)
    filterscale = xp.maximum(scale, one) if antialias else one
    support = support * filterscale
    # PIL's window (C casts truncate; floor is the same once clipped at 0), then the
    # filter stretched by the downscale factor, each output's weights summing to one.
    low = xp.maximum(xp.floor(centers - support + 0.5), xp.array(0.0, dtype))
    high = xp.minimum(xp.floor(centers + support + 0.5), size_f)
    inside = xp.logical_and(pixels >= low, pixels < high)
    values = kernel(xp, (pixels - centers + 0.5) * (1.0 / filterscale))
    weights = xp.where(inside, values, xp.zeros_like(values))
    return weights / xp.sum(weights, axis=0, keepdims=True)
