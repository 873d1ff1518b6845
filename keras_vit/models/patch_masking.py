"""The masked autoencoder's arithmetic on patches (He et al., 2022), usable alone:

- ``patchify`` / ``unpatchify``: images to one row of pixels per patch and back;
- ``pixel_targets``: the reconstruction targets, normalised per patch as MAE's
  ``norm_pix_loss``;
- ``visible_count`` and ``random_masking``: how many patches each image keeps, and which,
  from uniform noise;
- ``gather_tokens``: each image's tokens at its own indices;
- ``reconstruction_loss``: the mean squared error over the hidden patches.

``keras_vit.models.masked_autoencoder`` builds the model from them.
"""

from keras import ops

# Added to each patch's variance before its square root: MAE's.
PIXEL_EPSILON = 1e-6


def patchify(images, patch_size):
    """``(batch, height, width, channels)`` images -> ``(batch, patches, patch_size ** 2 *
    channels)``: one row per patch, row-major over the grid, each row's pixels row by row
    with the channels innermost (MAE's and transformers' order).

    >>> import numpy as np
    >>> tuple(patchify(np.zeros((2, 8, 12, 3), "float32"), 4).shape)
    (2, 6, 48)
    """
    batch, height, width, channels = ops.shape(images)
    rows, cols = height // patch_size, width // patch_size
    x = ops.reshape(images, (batch, rows, patch_size, cols, patch_size, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (batch, rows * cols, patch_size * patch_size * channels))


def unpatchify(patches, patch_size, grid, channels=3):
    """``patchify``'s inverse: ``(batch, rows * cols, patch_size ** 2 * channels)`` ->
    ``(batch, rows * patch_size, cols * patch_size, channels)`` for a ``(rows, cols)`` grid.

    >>> import keras, numpy as np
    >>> images = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")
    >>> bool(np.array_equal(keras.ops.convert_to_numpy(unpatchify(patchify(images, 4), 4, (2, 3))), images))
    True
    """
    rows, cols = grid
    batch = ops.shape(patches)[0]
    x = ops.reshape(patches, (batch, rows, cols, patch_size, patch_size, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (batch, rows * patch_size, cols * patch_size, channels))


def pixel_targets(images, patch_size, normalize=True, epsilon=PIXEL_EPSILON):
    """What the decoder reconstructs: each patch's pixels (``patchify``), and with
    ``normalize`` each patch less its mean, over its standard deviation: ``(x - mean) /
    sqrt(var + epsilon)`` with the unbiased variance (Bessel's correction, as MAE's and
    transformers' ``target.var``).

    >>> import keras, numpy as np
    >>> targets = pixel_targets(np.arange(16, dtype="float32").reshape(1, 4, 4, 1), 2)
    >>> first = keras.ops.convert_to_numpy(targets)[0, 0]  # pixels 0, 1, 4, 5: mean 2.5, variance 17 / 3
    >>> np.round(first.astype("float64"), 3).tolist()
    [-1.05, -0.63, 0.63, 1.05]
    """
    targets = ops.cast(patchify(images, patch_size), "float32")
    if not normalize:
        return targets
    mean, scale = patch_mean_and_scale(targets, epsilon)
    return (targets - mean) / scale


def patch_mean_and_scale(patches, epsilon=PIXEL_EPSILON):
    """Each patch's mean and ``sqrt(unbiased variance + epsilon)``, by which its pixels are normalised."""
    mean = ops.mean(patches, axis=-1, keepdims=True)
    count = patches.shape[-1]
    variance = ops.sum(ops.square(patches - mean), axis=-1, keepdims=True) / max(count - 1, 1)
    return mean, ops.sqrt(variance + epsilon)


def visible_count(num_patches, mask_ratio):
    """How many of ``num_patches`` each image keeps: ``int(num_patches * (1 - mask_ratio))``,
    rounded down as MAE does (49 of 196 at 0.75).

    >>> visible_count(196, 0.75), visible_count(16, 0.6)
    (49, 6)
    """
    return int(num_patches * (1 - mask_ratio))


def random_masking(noise, keep):
    """Which patches each image keeps: the ``keep`` of lowest ``noise`` (MAE's per-image
    shuffle by ``argsort``).

    Args:
        noise: ``(batch, patches)`` floats, uniform for a uniform choice.
        keep: patches kept per image (``visible_count``).

    Returns:
        ``(kept, restore, mask)``: int32 ``(batch, keep)`` indices of the kept patches (in
        the shuffled order), int32 ``(batch, patches)`` that puts the shuffled sequence
        (kept ones first) back in grid order, and float32 ``(batch, patches)``: 1 where a
        patch is hidden.

    >>> import keras, numpy as np
    >>> kept, restore, mask = random_masking(np.array([[0.9, 0.1, 0.5, 0.3]], "float32"), 2)
    >>> keras.ops.convert_to_numpy(kept).tolist(), keras.ops.convert_to_numpy(mask).tolist()
    ([[1, 3]], [[1.0, 0.0, 1.0, 0.0]])
    """
    shuffle = ops.cast(ops.argsort(noise, axis=1), "int32")
    restore = ops.cast(ops.argsort(shuffle, axis=1), "int32")
    kept = shuffle[:, :keep]
    # 1 for the hidden ones: a patch is hidden when its place in the shuffle is keep or later.
    mask = ops.cast(restore >= keep, "float32")
    return kept, restore, mask


def gather_tokens(tokens, index):
    """``tokens[b, index[b, i]]`` for each image ``b``: ``(batch, n, width)``, int
    ``(batch, k)`` -> ``(batch, k, width)``. One flat ``take``, the same on every backend.

    >>> import keras, numpy as np
    >>> x = np.arange(12, dtype="float32").reshape(2, 3, 2)
    >>> keras.ops.convert_to_numpy(gather_tokens(x, np.array([[2], [0]]))).tolist()
    [[[4.0, 5.0]], [[6.0, 7.0]]]
    """
    shape = ops.shape(tokens)
    batch, length, width = shape[0], shape[1], tokens.shape[-1]
    offsets = ops.arange(batch, dtype="int32")[:, None] * length
    flat = ops.reshape(ops.cast(index, "int32") + offsets, (-1,))
    picked = ops.take(ops.reshape(tokens, (-1, width)), flat, axis=0)
    count = index.shape[-1] if index.shape[-1] is not None else -1  # known in a graph: kept there
    return ops.reshape(picked, (batch, count, width))


def reconstruction_loss(predictions, targets, mask):
    """The mean over the hidden patches (``mask`` 1) of each patch's mean squared error.

    >>> import numpy as np
    >>> p, t = np.zeros((1, 2, 4), "float32"), np.ones((1, 2, 4), "float32")
    >>> float(reconstruction_loss(p, t * [[[1.0], [3.0]]], np.array([[0.0, 1.0]], "float32")))
    9.0
    """
    per_patch = ops.mean(ops.square(ops.cast(predictions, "float32") - targets), axis=-1)
    mask = ops.cast(mask, "float32")
    return ops.sum(per_patch * mask) / ops.sum(mask)
