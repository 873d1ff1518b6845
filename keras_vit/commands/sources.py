"""What the commands read: a model by file, preset folder or name, and image files."""

import os

from keras_vit.images import read_image


def load_any_model(source):
    """A ``.keras`` file (or a checkpoint with its architecture), a local preset folder or a
    preset name -> the model; an unknown name gets suggestions."""
    import keras_vit

    return keras_vit.load_model(source) if os.path.isfile(source) else keras_vit.create_model(source)


def image_paths(folder):
    """The image files of ``folder`` and its subfolders (a dataset's class folders), sorted
    by their path in it; ValueError if it is no folder or has no images."""
    from keras_vit.data import IMAGE_EXTENSIONS

    if not os.path.isdir(folder):
        raise ValueError(f"Expected a folder of images; {folder} is not a folder.")
    paths = sorted(
        os.path.relpath(os.path.join(place, name), folder)
        for place, _, names in os.walk(folder)
        for name in names
        if name.lower().endswith(IMAGE_EXTENSIONS)
    )
    if not paths:
        raise ValueError(
            f"Expected a folder of images ({', '.join(IMAGE_EXTENSIONS)}); {folder} has no images, "
            "in it or its subfolders."
        )
    return [os.path.join(folder, path) for path in paths]


def read_folder(folder, count=None):
    """Up to ``count`` images of ``folder`` (and its subfolders), sorted by path, as uint8 RGB arrays."""
    return [read_image(path) for path in image_paths(folder)[:count]]
