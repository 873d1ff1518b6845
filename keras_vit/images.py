"""Images as keras-vit takes them: an image file's path, a PIL image or an array of pixels."""

import os

import numpy as np


def read_image(path):
    """One image file -> ``(height, width, 3)`` uint8 RGB; ValueError naming it if unreadable."""
    from PIL import Image  # a dependency of keras-vit's own

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except FileNotFoundError:
        raise ValueError(f"Expected an image file; {path} does not exist.") from None
    except IsADirectoryError:
        raise ValueError(f"Expected an image file; {path} is a folder.") from None
    except (OSError, ValueError) as error:  # PIL's UnidentifiedImageError is an OSError
        raise ValueError(f"Cannot read {path} as an image ({error}).") from None


def as_pixels(image):
    """An image file's path or a PIL image -> ``(height, width, 3)`` uint8 RGB; an array of
    0..255 pixels (one image or a batch) with three channels, as it is; a grey one (``(height,
    width)`` or one channel) with its channel repeated three times, as PIL's ``convert("RGB")``
    and timm's loader make it. Any other shape is a ``ValueError`` naming it.

    >>> import numpy as np
    >>> from PIL import Image
    >>> as_pixels(Image.new("L", (5, 4))).shape   # grey -> RGB, (height, width, 3)
    (4, 5, 3)
    >>> as_pixels(np.zeros((4, 5), "uint8")).shape
    (4, 5, 3)
    """
    if isinstance(image, (str, os.PathLike)):
        return read_image(image)
    from PIL import Image

    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    shape = tuple(np.shape(image))
    if len(shape) == 2 or (len(shape) in (3, 4) and shape[-1] == 1):  # grey
        grey = image if len(shape) == 2 else image[..., 0]
        return np.repeat(np.asarray(grey)[..., None], 3, axis=-1)
    if len(shape) not in (3, 4) or shape[-1] != 3:
        raise ValueError(
            "Expected an image of shape (height, width, 3), or (height, width) or (height, width, 1) for a grey one, "
            f"or a batch of them; got shape {shape}."
        )
    return image


def resize_for_model(images, model):
    """Raw images -> ``uint8`` pixels at the model's input size, resized and cropped exactly
    as ``model.classify`` resizes and crops them (the model's own ``model.preprocessing``
    without its mean and std), rounded to whole levels: what an export's ``serving_default``,
    its LiteRT and ONNX files and its ``.pt2`` take.

    Args:
        images: as ``model.classify`` takes them: one ``(height, width, 3)`` image of 0..255
            pixels, a batch, a list of images of different sizes, an image file's path or a
            PIL image.
        model: a keras-vit model with ``model.preprocessing``, or that
            ``keras_vit.layers.ImagePreprocessing`` layer itself.

    Returns:
        A numpy ``uint8`` array: ``(height, width, 3)`` for one image, ``(batch, height,
        width, 3)`` for a batch or a list.

    Examples:
        >>> from keras_vit.layers import ImagePreprocessing
        >>> preprocessing = ImagePreprocessing(16, crop_fraction=0.875)   # or a model
        >>> pixels = resize_for_model(np.full((30, 40, 3), 200, np.uint8), preprocessing)
        >>> pixels.shape, pixels.dtype, int(pixels.min()), int(pixels.max())
        ((16, 16, 3), dtype('uint8'), 200, 200)
    """
    import keras

    layer = getattr(model, "preprocessing", model)
    if layer is None or not all(hasattr(layer, a) for a in ("image_size", "crop_fraction", "get_config")):
        raise ValueError(
            "Expected a keras-vit model with its pre-processing (model.preprocessing) or a "
            f"keras_vit.layers.ImagePreprocessing; got {type(model).__name__}"
            + (" whose preprocessing is None." if layer is None else ".")
        )
    # The model's own resize and crop, with 0..255 out (mean 0, std 1/255) in float32 whatever
    # the model's dtype. The layer's class is taken from the layer given: this module sits
    # below keras_vit.layers and imports nothing from it.
    config = {**layer.get_config(), "mean": 0.0, "std": 1.0 / 255.0, "dtype": "float32", "name": "resize_for_model"}
    resize = type(layer).from_config(config)

    def resized(pixels):
        return keras.ops.convert_to_numpy(resize(pixels))

    if isinstance(images, (list, tuple)):
        out = np.stack([resized(as_pixels(image)) for image in images])
    else:
        out = resized(as_pixels(images))
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def is_raw(image):
    """Whether ``image`` is raw pixels as ``model.classify`` takes them, by its kind alone: an
    image file's path, a PIL image or an array of integers (uint8 0..255 typically). A float
    array is not: it may be pre-processed already.

    >>> is_raw(np.zeros((4, 4, 3), np.uint8)), is_raw(np.zeros((4, 4, 3), np.float32))
    (True, False)
    """
    if isinstance(image, (str, os.PathLike)):
        return True
    from PIL import Image

    if isinstance(image, Image.Image):
        return True
    return np.asarray(image).dtype.kind in "ui"


def as_model_input(images, layer, preprocessed=None):
    """Images -> the float32 numpy batch a model takes, pre-processed by ``layer`` (its
    ``model.preprocessing``) where they are raw, exactly as ``model.classify`` pre-processes them.

    Args:
        images: what ``model.classify`` takes (one image or a batch of 0..255 pixels, a list
            of images of any sizes, image files' paths, PIL images), or a float batch (or one
            image) already pre-processed for the model.
        layer: the model's ``keras_vit.layers.ImagePreprocessing``, or None.
        preprocessed: None: judged by kind (``is_raw``): files, PIL images and integer arrays
            are raw, float arrays pre-processed, and refused where they lie outside what
            ``layer`` makes (raw 0..255 floats, say); True: taken as they are; False: raw
            0..255 pixels of any dtype, pre-processed.

    Returns:
        A float32 array: ``(batch, height, width, channels)``, or ``(height, width, channels)``
        for one float image given as it is.

    Examples:
        >>> from keras_vit.layers import ImagePreprocessing
        >>> layer = ImagePreprocessing(8)  # mean and std 0.5: -1..1 out
        >>> batch = as_model_input(np.full((12, 16, 3), 255, np.uint8), layer)
        >>> batch.shape, float(batch.max())
        ((1, 8, 8, 3), 1.0)
        >>> as_model_input(np.full((1, 8, 8, 3), 255.0), layer)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected images pre-processed for the model (floats in -1..1, ...) ... preprocessed=False.
    """
    import keras

    if preprocessed not in (None, True, False):
        raise ValueError(f"preprocessed must be None (judged by dtype), True or False; got {preprocessed!r}.")
    many = isinstance(images, (list, tuple))
    items = list(images) if many else [images]
    raw = [not preprocessed and (preprocessed is False or is_raw(item)) for item in items]
    if not any(raw):
        floats = np.asarray(np.stack(items) if many else images, dtype="float32")
        if preprocessed is None:
            _check_preprocessed(floats, layer)
        return floats
    if not all(raw):
        raise ValueError(
            "Expected images all raw (files, PIL images, uint8 pixels) or all pre-processed (floats); got a mix."
        )
    if layer is None:
        raise ValueError(
            "The model has no pre-processing (model.preprocessing is None) to make its input from raw images: give "
            "them pre-processed as it takes them (floats), or build it with preprocessing="
            "keras_vit.layers.ImagePreprocessing(...)."
        )

    def run(pixels):
        return keras.ops.convert_to_numpy(layer(pixels)).astype("float32")

    if many:
        return np.stack([run(as_pixels(item)) for item in items])
    pixels = as_pixels(images)
    return run(pixels[None] if np.ndim(pixels) == 3 else pixels)


def _check_preprocessed(images, layer):
    """Float ``images`` within what ``layer`` makes of 0..255 pixels (``(x / 255 - mean) / std``)."""
    if layer is None or images.size == 0:
        return
    mean = np.asarray(layer.mean, np.float64)
    std = np.asarray(layer.std, np.float64)
    low, high = float(np.min(-mean / std)), float(np.max((1.0 - mean) / std))
    slack = 1e-3 * (high - low)  # float32 rounding of the normalisation
    given_low, given_high = float(np.min(images)), float(np.max(images))
    if given_low < low - slack or given_high > high + slack:
        raise ValueError(
            f"Expected images pre-processed for the model (floats in {low:.4g}..{high:.4g}, as its pre-processing "
            f"makes them) or raw pixels as uint8; got floats in {given_low:.4g}..{given_high:.4g}: raw 0..255 "
            "pixels? Give them as uint8 or with preprocessed=False."
        )
