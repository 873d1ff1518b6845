"""Resampling of 2D grids and ViT position embeddings, in pure numpy.

One resize along one axis is a matrix product: ``axis_weights`` builds that matrix as
PIL's ``precompute_coeffs`` does (the filter stretched by the downscale factor when
antialiasing, the window clipped at the borders, each output's weights summing to one).
With antialiasing this is also ``torch.nn.functional.interpolate(..., antialias=True)``,
the kernel timm resamples position embeddings with. Its users: the images' resize in
``ImagePreprocessing``, the position embeddings' resampling in a dynamic-size model, and
``resize_grid`` below.

``resize_grid`` reproduces ``torch.nn.functional.interpolate(..., align_corners=False)``
(the function timm and Hugging Face use to resize position embeddings), so a converted
checkpoint matches the peer's resized weights to float rounding rather than only
approximately; ``resample_position_embedding`` applies it to a ViT's table, for the
checkpoint loader and ``keras_vit.resize``.

Peer defaults, for choosing ``method``/``antialias``:

* timm ``resample_abs_pos_embed`` / ``checkpoint_filter_fn``: bicubic, antialias=True.
* timm's loader for the original google-research ``.npz`` files: bilinear, antialias=False.
* HF transformers ViT ``interpolate_pos_encoding``: bicubic, antialias=False.

Numpy only here, below the layers and the models, so that checkpoints are converted on
the host before any Keras backend is involved.
"""

import math

import numpy as np

from keras_vit import checks

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


METHODS = ("nearest", "bilinear", "bicubic")


def _nearest_matrix(in_size, out_size):
    # torch's legacy "nearest": src = floor(dst * (in / out)), with the scale and the
    # product in float32 as in its C++ kernel (float64 can floor differently at ties).
    scale = np.float32(in_size) / np.float32(out_size)
    src = np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int64)
    matrix = np.zeros((out_size, in_size))
    matrix[np.arange(out_size), np.minimum(src, in_size - 1)] = 1.0
    return matrix


def _interp_matrix(in_size, out_size, taps):
    # Plain (non-antialiased) torch kernels: sample the input at the half-pixel source
    # coordinate and clamp out-of-range taps to the border pixel.
    src = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
    matrix = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    if taps == 2:  # bilinear: torch clamps the *coordinate* at 0 before flooring
        src = np.maximum(src, 0.0)
        i0 = np.floor(src).astype(np.int64)
        frac = src - i0
        np.add.at(matrix, (rows, np.minimum(i0, in_size - 1)), 1.0 - frac)
        np.add.at(matrix, (rows, np.minimum(i0 + 1, in_size - 1)), frac)
    else:  # bicubic: 4 taps at floor(src)-1 .. floor(src)+2, clamped *indices*, A=-0.75
        i0 = np.floor(src).astype(np.int64)
        frac = src - i0
        for k in range(-1, 3):
            np.add.at(matrix, (rows, np.clip(i0 + k, 0, in_size - 1)), keys_cubic(np, frac - k, -0.75))
    return matrix


def _antialias_matrix(in_size, out_size, method):
    # torch's antialias path is ported from PIL's: when downsampling, the filter support
    # is stretched by the scale so that every input pixel contributes; taps that would
    # fall outside the image are dropped and the remaining weights renormalised.
    return axis_weights(np, in_size, out_size, 0, out_size, method, True, "float64").T


def _axis_matrix(in_size, out_size, method, antialias):
    if method == "nearest":
        return _nearest_matrix(in_size, out_size)
    if antialias:
        return _antialias_matrix(in_size, out_size, method)
    return _interp_matrix(in_size, out_size, 2 if method == "bilinear" else 4)


def resize_grid(grid, new_size, method="bicubic", antialias=True):
    """Resize an ``(H, W, C)`` array to ``(new_h, new_w, C)`` like torch's ``interpolate``.

    Matches ``torch.nn.functional.interpolate(x_nchw, size=new_size, mode=method,
    align_corners=False, antialias=antialias)`` for ``method`` in :data:`METHODS`
    (``antialias`` must be False for ``"nearest"``). The resize is separable: one
    ``(out, in)`` matrix per axis, applied with ``einsum`` in float64; the result has the
    input's float dtype (float32 for non-float input). One deliberate difference: with
    antialias and an output width of 1 (height > 1), torch's CPU kernel mis-resamples the
    height axis; this returns what torch's transposed call (and any separable filter) gives.

    Examples:
        >>> import numpy as np
        >>> grid = np.arange(2 * 3 * 1, dtype=np.float32).reshape(2, 3, 1)
        >>> resize_grid(grid, (4, 6), method="nearest", antialias=False)[:, :, 0].shape
        (4, 6)
        >>> float(resize_grid(grid, 1, method="bilinear")[0, 0, 0])  # antialiased average
        2.5
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "nearest" and antialias:
        raise ValueError(
            "antialias=True is only supported for 'bilinear' and 'bicubic'; pass antialias=False with method='nearest'"
        )
    grid = np.asarray(grid)
    if grid.ndim != 3:
        raise ValueError(f"expected grid of shape (H, W, C), got {grid.shape}")
    new_h, new_w = checks.pair(new_size, "new_size")
    dtype = grid.dtype if np.issubdtype(grid.dtype, np.floating) else np.float32
    rows = _axis_matrix(grid.shape[0], new_h, method, antialias)
    cols = _axis_matrix(grid.shape[1], new_w, method, antialias)
    out = np.einsum("oh,pw,hwc->opc", rows, cols, grid.astype(np.float64), optimize=True)
    return out.astype(dtype)


def resample_position_embedding(posemb, new_grid, old_grid=None, num_prefix_tokens=1, method="bicubic", antialias=True):
    """Resize a ``(1, prefix + old_h*old_w, D)`` position embedding to a new patch grid.

    The grid tokens are a row-major flattened ``(old_h, old_w)`` grid, as in timm's
    ``pos_embed``, HF's ``position_embeddings`` and google-research's
    ``Transformer/posembed_input/pos_embedding``. The first ``num_prefix_tokens`` rows
    (class/distillation tokens) have no spatial position, so they are kept unchanged.
    ``old_grid`` defaults to the square root of the grid token count. The defaults
    (bicubic, antialias=True) are timm's ``resample_abs_pos_embed`` defaults; use
    bilinear/antialias=False to match timm's ``.npz`` loader and bicubic/antialias=False
    to match HF's ``interpolate_pos_encoding``.

    Examples:
        >>> import numpy as np
        >>> posemb = np.zeros((1, 1 + 14 * 14, 8), dtype=np.float32)
        >>> resample_position_embedding(posemb, (24, 24)).shape
        (1, 577, 8)
    """
    posemb = np.asarray(posemb)
    if posemb.ndim != 3 or posemb.shape[0] != 1 or posemb.shape[1] < num_prefix_tokens:
        raise ValueError(
            f"expected posemb of shape (1, tokens, dim) with tokens >= "
            f"num_prefix_tokens={num_prefix_tokens}, got {posemb.shape}"
        )
    new_h, new_w = checks.pair(new_grid, "new_grid")
    num_grid = posemb.shape[1] - num_prefix_tokens
    if old_grid is None:
        side = math.isqrt(num_grid)
        if side * side != num_grid:
            raise ValueError(
                f"cannot infer old_grid: {num_grid} grid tokens is not a perfect square; pass old_grid=(h, w)"
            )
        old_grid = (side, side)
    old_h, old_w = checks.pair(old_grid, "old_grid")
    if old_h * old_w != num_grid:
        raise ValueError(f"old_grid {(old_h, old_w)} needs {old_h * old_w} grid tokens, got {num_grid}")
    if (old_h, old_w) == (new_h, new_w):
        return posemb.copy()
    prefix, grid = posemb[0, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    grid = resize_grid(grid.reshape(old_h, old_w, -1), (new_h, new_w), method, antialias)
    out = np.concatenate([prefix.astype(grid.dtype), grid.reshape(new_h * new_w, -1)], axis=0)
    return out[None]
