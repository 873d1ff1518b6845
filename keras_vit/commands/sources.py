"""What the commands read: a model by file, preset folder or name, and image files."""

import os

from keras_vit.images import read_image


def load_any_model(source):
    """A ``.keras`` file (or a checkpoint with its architecture), a local preset folder or a
    preset name -> the model; an unknown name gets suggestions."""
    import keras_vit

    return keras_vit.load_model(source) if os.path.isfile(source) else keras_vit.create_model(source)


def image_paths(folder):
    """The image files of ``folder``, sorted by name; ValueError if it is none or has none."""
    from keras_vit.data import IMAGE_EXTENSIONS

    if not os.path.isdir(folder):
        raise ValueError(f"Expected a folder of images; {folder} is not a folder.")
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(IMAGE_EXTENSIONS))
    if not names:
        raise ValueError(f"Expected a folder of images ({', '.join(IMAGE_EXTENSIONS)}); {folder} has no images.")
    return [os.path.join(folder, name) for name in names]


def read_folder(folder, count=None):
    """Up to ``count`` images of ``folder``, sorted by name, as uint8 RGB arrays."""
    return [read_image(path) for path in image_paths(folder)[:count]]
