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
    """An image file's path or a PIL image -> ``(height, width, 3)`` uint8 RGB; anything else
    (an array of 0..255 pixels, one image or a batch) is returned as it is.

    >>> import numpy as np
    >>> from PIL import Image
    >>> as_pixels(Image.new("L", (5, 4))).shape   # grey -> RGB, (height, width, 3)
    (4, 5, 3)
    """
    if isinstance(image, (str, os.PathLike)):
        return read_image(image)
    from PIL import Image

    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
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
