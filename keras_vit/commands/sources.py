"""What the commands read besides a model (which ``keras_vit.load_model`` loads): image files."""

import os


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
