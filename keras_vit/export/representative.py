"""Images for calibration (full-integer int8) and for verifying an export.

Exports take raw uint8 images, so these are uint8 too: the graph's own pre-processing
runs during calibration, exactly as it will at inference time.
"""

import os

import numpy as np

REPRESENTATIVE_SOURCES = ("digits",)  # by name; else a folder of images, or an array
DEFAULT_NUM_REPRESENTATIVE = 300
DEFAULT_NUM_VERIFICATION = 64


def digits_images(image_size, split="train"):
    """The embedded digits split as uint8 images at ``image_size``, with their labels.

    The evaluation transform of ``keras_vit.data`` (bilinear resize), rounded back to
    uint8: what a client would send to the exported model.

    >>> images, labels = digits_images(16, "test")
    >>> images.shape, images.dtype, labels.shape
    ((359, 16, 16, 3), dtype('uint8'), (359,))
    """
    from keras_vit.data import load_digits, preprocess_split

    data = getattr(load_digits(), split)
    images, labels = preprocess_split(data, image_size, normalization=None)
    return np.clip(np.round(images), 0, 255).astype(np.uint8), labels


def check_images(images, image_shape, what):
    """``images`` as a uint8 ``(N, H, W, C)`` array matching ``image_shape``, else a ValueError."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or tuple(images.shape[1:]) != tuple(image_shape) or not len(images):
        raise ValueError(
            f"Expected {what} as raw uint8 images of shape (N, {', '.join(map(str, image_shape))}) "
            f"with N >= 1 (the exports do the pre-processing); got {images.dtype} {images.shape}."
        )
    return images


def check_source(source):
    """Validates a representative-data argument before any work: None, a name, a folder of
    images (a path; its subfolders too), or images. Returns it, a path as text."""
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if source is None or not isinstance(source, str):
        return source
    if source not in REPRESENTATIVE_SOURCES and not os.path.isdir(source):
        raise ValueError(
            f"Unknown representative data {source!r}; expected one of {REPRESENTATIVE_SOURCES}, a folder of "
            "images (its subfolders too) or a uint8 array of images."
        )
    return source


def folder_images(folder, image_shape, count, seed=0):
    """Up to ``count`` images of ``folder`` and its subfolders (a training folder of one
    subfolder per class, say), drawn in a seeded order and resized (bilinear) to the
    model's size as a client would send them: uint8 ``(N, H, W, 3)``.

    >>> import tempfile
    >>> from PIL import Image
    >>> folder = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(folder, "cats"))
    >>> Image.new("RGB", (40, 30)).save(os.path.join(folder, "cats", "a.png"))
    >>> folder_images(folder, (16, 16, 3), 300).shape
    (1, 16, 16, 3)
    """
    from PIL import Image

    from keras_vit.data import IMAGE_EXTENSIONS
    from keras_vit.images import read_image

    _check_three_channels(image_shape, folder)
    paths = sorted(
        os.path.join(place, name)
        for place, _, names in os.walk(folder)
        for name in names
        if name.lower().endswith(IMAGE_EXTENSIONS)
    )
    if not paths:
        raise ValueError(f"Expected images ({', '.join(IMAGE_EXTENSIONS)}) in {folder} or its subfolders; found none.")
    height, width, _ = image_shape
    chosen = np.sort(np.random.default_rng(seed).permutation(len(paths))[:count])
    resized = [Image.fromarray(read_image(paths[i])).resize((width, height), Image.BILINEAR) for i in chosen]
    return np.stack([np.asarray(image) for image in resized])


def representative_images(source, image_shape, count=DEFAULT_NUM_REPRESENTATIVE, seed=0):
    """Up to ``count`` calibration images (uint8) from ``"digits"`` (training split), a
    folder (``folder_images``) or an array.

    The images are drawn in a seeded random order, so every class is present however
    small ``count`` is, and the same run gives the same calibration.
    """
    if source is None:
        return None
    if isinstance(source, str) and check_source(source) not in REPRESENTATIVE_SOURCES:
        return folder_images(source, image_shape, count, seed)
    if isinstance(source, str):
        _check_three_channels(image_shape, source)
        images, _ = digits_images(image_shape[:2], "train")
    else:
        images = check_images(source, image_shape, "representative data")
    order = np.random.default_rng(seed).permutation(len(images))[:count]
    return images[np.sort(order)]


def verification_images(source, image_shape, count=DEFAULT_NUM_VERIFICATION, seed=0):
    """Images the exports are checked on: digits' validation split, a folder's images (drawn
    in another order than calibration's), the given array, or noise.

    Held apart from calibration for ``"digits"``; without any source, seeded uniform noise
    (enough to check float formats, which must agree on any input).
    """
    if isinstance(source, str) and source not in REPRESENTATIVE_SOURCES:
        return folder_images(source, image_shape, count, seed + 1)
    if isinstance(source, str):
        _check_three_channels(image_shape, source)
        images, _ = digits_images(image_shape[:2], "validation")
        return images[:count]
    if source is not None:
        return check_images(source, image_shape, "verification images")[:count]
    return np.random.default_rng(seed).integers(0, 256, (count, *image_shape), dtype=np.uint8)


def _check_three_channels(image_shape, source):
    if image_shape[-1] != 3:
        raise ValueError(f"The {source!r} images have 3 channels; the model expects {image_shape[-1]}.")
