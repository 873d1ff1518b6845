"""Any tensorflow-datasets (tfds) image-classification dataset, by name.

Names are checked against the registered builders before anything is downloaded or
prepared, so a typo fails in a second with a list of close names instead of after a
download.
"""

import difflib

from keras_vit.data.splits import DatasetInfo, DatasetSplits, Split
from keras_vit.dependencies import require

# Datasets of digits and characters: a mirror image changes or destroys the label.
_NO_FLIP = frozenset({"mnist", "emnist", "kmnist", "svhn_cropped", "binarized_mnist", "mnist_corrupted"})


def tfds_names():
    """Names of the tfds builders registered locally (no network: community lists are off)."""
    tfds = require("tensorflow_datasets", "data")

    return sorted(tfds.list_builders(with_community_datasets=False))


def _base_name(name):
    # "cifar100:3.0.2" and "imagenet2012_subset/10pct" are builder "cifar100" and
    # "imagenet2012_subset" with a version or a config.
    return name.split("/")[0].split(":")[0]


def _is_namespaced(name):
    # "huggingface:mnist" names a community dataset (not in the local list); the part after
    # a colon in "mnist:3.0.1" is a version and starts with a digit.
    head = name.split("/")[0]
    return ":" in head and not head.split(":", 1)[1][:1].isdigit()


class UnknownDatasetError(ValueError):
    """A dataset name that is neither 'digits', a folder, nor a registered tfds builder."""


def unknown_dataset_error(name, extra_names=()):
    """An UnknownDatasetError for ``name``, listing the closest known names."""
    candidates = list(extra_names) + tfds_names()
    close = difflib.get_close_matches(_base_name(name), candidates, n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(repr(c) for c in close)}?" if close else ""
    return UnknownDatasetError(
        f"Unknown dataset {name!r}: expected 'digits', an existing folder of images with one "
        f"subfolder per class, or a tensorflow-datasets name (see tfds.list_builders()).{hint}"
    )


def _choose_splits(available, train_split, validation_split, test_split, validation_fraction):
    """Picks the train / validation / test split strings.

    Upstream ViT's convention: "validation" if the dataset has one, else "test" (as the
    ViT fine-tuning recipes evaluate on it), else the last ``validation_fraction`` of
    "train" (tfds split slicing, whole percents). Test is "test" if present, else the
    validation split.
    """
    if available:
        has = set(available)
    else:
        # Split metadata is missing before preparation (and under tfds.testing.mock_data):
        # assume the most common layout.
        has = {"train", "test"}
    train = train_split or "train"
    if validation_split is None:
        if "validation" in has:
            validation_split = "validation"
        elif "test" in has:
            validation_split = "test"
        elif train_split is None:
            percent = min(99, max(1, int(round(100 * validation_fraction))))
            train = f"train[:{100 - percent}%]"
            validation_split = f"train[{100 - percent}%:]"
        else:
            raise ValueError(
                f"Cannot choose a validation split: the dataset has splits {sorted(has)} and "
                f"train_split={train_split!r} was given; pass validation_split as well."
            )
    if test_split is None:
        test_split = "test" if "test" in has else validation_split
    return train, validation_split, test_split


def _features(info, name):
    # Image and label keys: the supervised keys when the builder declares them.
    keys = info.supervised_keys
    if keys and len(keys) == 2 and all(isinstance(k, str) for k in keys):
        image_key, label_key = keys
    else:
        image_key, label_key = "image", "label"
    features = info.features
    if image_key not in features or label_key not in features:
        raise ValueError(
            f"tfds dataset {name!r} is not an image-classification dataset: expected an "
            f"image feature and a class-label feature, got features {list(features.keys())}."
        )
    label_feature = features[label_key]
    if not hasattr(label_feature, "num_classes"):
        raise ValueError(
            f"tfds dataset {name!r}: expected {label_key!r} to be a ClassLabel, got {type(label_feature).__name__}."
        )
    return image_key, label_key, features[image_key], label_feature


def load_tfds(
    name,
    data_dir=None,
    download=True,
    train_split=None,
    validation_split=None,
    test_split=None,
    validation_fraction=0.1,
):
    """Loads a tensorflow-datasets image-classification dataset as train/validation/test.

    The name is checked first: an unknown name raises ValueError listing close names,
    before anything downloads. Splits are chosen as upstream ViT does ("validation", else
    "test", else the last ``validation_fraction`` of "train"); pass ``train_split``,
    ``validation_split`` or ``test_split`` (any tfds split string, e.g. "train[:98%]") to
    choose yourself. Images come as uint8 ``(H, W, 3)`` (grey repeated to RGB), labels as
    int32. ``data_dir`` and ``download`` go to tfds unchanged.

    Examples:
        >>> import tensorflow_datasets as tfds
        >>> with tfds.testing.mock_data(num_examples=4):  # no download in this example
        ...     splits = load_tfds("cifar10")
        >>> splits.info.num_classes, splits.train.name, splits.validation.name
        (10, 'train', 'test')

        cifar10 has no "validation" split, so its "test" split serves, as in upstream ViT.
    """
    tf = require("tensorflow", "data")
    tfds = require("tensorflow_datasets", "data")

    if not isinstance(name, str) or not name:
        raise ValueError(f"A tfds dataset name must be a non-empty string; got {name!r}.")
    if not _is_namespaced(name) and _base_name(name) not in tfds_names():
        raise unknown_dataset_error(name)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise unknown_dataset_error(name) from None
    except (AssertionError, ValueError) as error:
        # An unknown version or config: tfds's message lists the valid ones.
        raise ValueError(f"tfds cannot build dataset {name!r}: {error}") from error
    if download:
        builder.download_and_prepare()
    info = builder.info
    image_key, label_key, image_feature, label_feature = _features(info, name)

    shape = tuple(image_feature.shape)
    if len(shape) != 3 or shape[-1] not in (1, 3):
        raise ValueError(f"tfds dataset {name!r}: expected images of shape (H, W, 1) or (H, W, 3), got {shape}.")
    channels = shape[-1]
    dataset_info = DatasetInfo(
        name=name,
        num_classes=int(label_feature.num_classes),
        class_names=tuple(label_feature.names),
        image_shape=shape[:2] + (3,),
        horizontal_flip=_base_name(name) not in _NO_FLIP,
    )

    def to_pair(example):
        image = example[image_key]
        if channels == 1:
            image = tf.image.grayscale_to_rgb(image)
        return tf.cast(image, tf.uint8), tf.cast(example[label_key], tf.int32)

    available = list(info.splits.keys())
    chosen = _choose_splits(available, train_split, validation_split, test_split, validation_fraction)
    splits = []
    for split in chosen:  # train, validation, test
        dataset = builder.as_dataset(split=split, shuffle_files=False)
        dataset = dataset.map(to_pair, num_parallel_calls=tf.data.AUTOTUNE)
        try:
            num_examples = info.splits[split].num_examples if available else None
        except (KeyError, ValueError):
            num_examples = None
        splits.append(Split(split, dataset_info, dataset=dataset, num_examples=num_examples))
    return DatasetSplits(*splits, dataset_info)
