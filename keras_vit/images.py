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
