"""Upstream ViT pre-processing as TensorFlow ops for tf.data map functions.

tf.data is the input engine on every Keras backend (JAX and PyTorch included), so these
are plain tf ops. Randomness is stateless: each op takes an explicit ``seed`` (a shape
``[2]`` integer tensor), so a pipeline built with the same seed yields the same images.
Images are handled as float32 in 0..255 until ``normalize``.
"""

import numpy as np

from keras_vit import checks
from keras_vit.dependencies import require

# ImageNet statistics in 0..1 units, as used by timm and torchvision checkpoints.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

NORMALIZATIONS = ("vit", "imagenet", None)
"""``"vit"``: ``x / 127.5 - 1`` into [-1, 1], the original ViT checkpoints' convention.
``"imagenet"``: ``(x / 255 - mean) / std`` per channel (timm checkpoints of some variants).
``None``: float32 pixels left in 0..255."""


def check_normalization(normalization):
    """Returns ``normalization`` if it is one of ``NORMALIZATIONS``, else raises ValueError."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS!r}; got normalization={normalization!r}.")
    return normalization


def normalize(images, normalization="vit"):
    """Scales 0..255 pixels (any shape ending in 3 channels) for the model, as float32.

    Examples:
        >>> import numpy as np
        >>> normalize(np.array([[[0.0, 127.5, 255.0]]]), "vit").numpy().tolist()
        [[[-1.0, 0.0, 1.0]]]
    """
    tf = require("tensorflow", "data")

    check_normalization(normalization)
    images = tf.cast(images, tf.float32)
    if normalization == "vit":
        return images / 127.5 - 1.0
    if normalization == "imagenet":
        mean = tf.constant(np.array(IMAGENET_MEAN, np.float32) * 255.0)
        std = tf.constant(np.array(IMAGENET_STD, np.float32) * 255.0)
        return (images - mean) / std
    return images


def resize(image, image_size):
    """Bilinear resize of one image ``(H, W, C)`` (or a batch) to ``image_size``, float32.

    The evaluation and fine-tuning transform of upstream ViT: no crop, no antialiasing.

    Examples:
        >>> import numpy as np
        >>> resize(np.zeros((8, 8, 3), np.uint8), 16).shape
        TensorShape([16, 16, 3])
    """
    tf = require("tensorflow", "data")

    height, width = checks.pair(image_size)
    return tf.image.resize(tf.cast(image, tf.float32), (height, width), method="bilinear")


def random_resized_crop(
    image,
    image_size,
    seed,
    area_range=(0.08, 1.0),
    aspect_ratio_range=(3.0 / 4.0, 4.0 / 3.0),
):
    """Inception-style crop of one image ``(H, W, C)``, resized bilinearly to ``image_size``.

    Samples a box covering a fraction ``area_range`` of the image with width/height ratio
    in ``aspect_ratio_range`` (the whole image when no box fits after 100 tries), as
    upstream ViT's pre-training pipeline does with ``tf.image.sample_distorted_bounding_box``.
    ``seed`` is a ``[2]`` integer tensor; the same seed gives the same crop.

    Examples:
        >>> import numpy as np
        >>> crop = random_resized_crop(np.zeros((32, 32, 3), np.uint8), 16, seed=[0, 1])
        >>> crop.shape, crop.dtype.name
        (TensorShape([16, 16, 3]), 'float32')
    """
    tf = require("tensorflow", "data")

    area_range = checks.fraction_range(area_range, "area_range")
    aspect_ratio_range = checks.fraction_range(aspect_ratio_range, "aspect_ratio_range", high=np.inf)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=tf.zeros([1, 0, 4], tf.float32),  # no boxes: the whole image counts
        seed=seed,
        min_object_covered=0.0,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=100,
        use_image_if_no_bounding_boxes=True,
    )
    crop = tf.slice(image, begin, size)
    return resize(crop, image_size)


def random_flip(image, seed):
    """Flips one image left-right with probability 1/2, chosen by ``seed`` (a [2] tensor).

    Examples:
        >>> import numpy as np
        >>> random_flip(np.zeros((4, 4, 3), np.float32), seed=[0, 1]).shape
        TensorShape([4, 4, 3])
    """
    tf = require("tensorflow", "data")

    return tf.image.stateless_random_flip_left_right(image, seed=seed)
