"""One entry point for every source: ``load_dataset("digits" | folder | tfds name)``."""

import os

from keras_vit import checks
from keras_vit.data.digits import DIGITS_NAME, load_digits
from keras_vit.data.folder import load_image_folder
from keras_vit.data.tfds_source import UnknownDatasetError, load_tfds, unknown_dataset_error


def _looks_like_path(name):
    # A separator, "~" or a leading "." means the caller meant a folder, never a tfds name
    # (tfds configs use "/" too, but "name/config" is neither absolute nor dotted).
    return name.startswith((".", "~", os.sep)) or (os.altsep is not None and os.altsep in name) or os.path.isabs(name)


def load_dataset(
    name_or_path,
    *,
    validation_fraction=0.1,
    test_fraction=0.2,
    seed=0,
    data_dir=None,
    download=True,
    train_split=None,
    validation_split=None,
    test_split=None,
):
    """Loads train / validation / test splits of uint8 RGB images and integer labels.

    ``name_or_path`` is resolved in this order:

    * ``"digits"``: scikit-learn's embedded 8x8 digits (no download), see ``load_digits``;
    * an existing directory: a folder of images, one subfolder per class, see
      ``load_image_folder``;
    * otherwise a tensorflow-datasets name (``"cifar10"``, ``"oxford_flowers102"``, a
      config or version such as ``"cifar10:3.0.2"``), see ``load_tfds``.

    ``validation_fraction``, ``test_fraction`` and ``seed`` fix the stratified split of
    digits and of unsplit folders; ``validation_fraction`` also sizes the validation part
    carved out of a tfds "train" split when the dataset has neither "validation" nor
    "test". ``data_dir``, ``download`` and the ``*_split`` strings go to tfds. Anything
    else raises ValueError, before any download, listing close names.

    Examples:
        >>> splits = load_dataset("digits")
        >>> splits.info.name, splits.info.num_classes, splits.info.image_shape
        ('digits', 10, (8, 8, 3))
        >>> train, validation, test = splits
    """
    checks.split_fractions(validation_fraction, test_fraction)
    if isinstance(name_or_path, os.PathLike):
        name_or_path = os.fspath(name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(
            f"Expected a dataset name ('digits' or a tensorflow-datasets name) or a folder path; got {name_or_path!r}."
        )
    if name_or_path == DIGITS_NAME:
        return load_digits(validation_fraction, test_fraction, seed)
    expanded = os.path.expanduser(name_or_path)
    if os.path.isdir(expanded):
        return load_image_folder(expanded, validation_fraction, test_fraction, seed)
    if _looks_like_path(name_or_path):
        raise ValueError(
            f"Expected an existing folder of images; got {name_or_path!r}, which does not exist or is not a folder."
        )
    if os.path.exists(expanded):  # a file, not a folder
        raise ValueError(
            f"Expected a folder of images (one subfolder per class), 'digits' or a "
            f"tensorflow-datasets name; got {name_or_path!r}, which is a file."
        )
    try:
        return load_tfds(
            name_or_path,
            data_dir=data_dir,
            download=download,
            train_split=train_split,
            validation_split=validation_split,
            test_split=test_split,
            validation_fraction=validation_fraction,
        )
    except UnknownDatasetError:
        # Again with 'digits' among the suggestions, which tfds does not know.
        raise unknown_dataset_error(name_or_path, extra_names=(DIGITS_NAME,)) from None
