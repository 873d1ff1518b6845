"""What every source returns: train / validation / test splits plus dataset metadata.

A split holds either in-memory arrays (uint8 images ``(N, H, W, 3)`` and integer labels) or
an unbatched ``tf.data.Dataset`` of ``(uint8 image (H, W, 3), int32 label)`` pairs; both feed
``make_pipeline`` the same way.
"""

import dataclasses

import numpy as np

from keras_vit import checks
from keras_vit.dependencies import require


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Metadata of a loaded dataset.

    Attributes:
        name: the dataset's name ("digits", a tfds name, or the folder path).
        num_classes: number of classes; labels are integers in ``[0, num_classes)``.
        class_names: one name per label index.
        image_shape: ``(height, width, 3)`` of the source images as delivered (always 3
            channels); ``None`` for a dimension that varies between images.
        horizontal_flip: whether a random left-right flip keeps the label (False for digits
            and characters, whose identity a mirror changes). ``make_pipeline`` uses it as
            its default.
        crop_area_range: the Inception-crop area range that suits these images; (0.08, 1.0)
            is upstream's for full-size images, tiny images need a larger minimum.
    """

    name: str
    num_classes: int
    class_names: tuple
    image_shape: tuple
    horizontal_flip: bool = True
    crop_area_range: tuple = (0.08, 1.0)


@dataclasses.dataclass(frozen=True, eq=False)  # arrays have no single truth value
class Split:
    """One split of a dataset: arrays in memory, or an unbatched ``tf.data.Dataset``.

    Exactly one of ``(images, labels)`` and ``dataset`` is set. ``num_examples`` is None
    when it cannot be known without reading the data.
    """

    name: str
    info: DatasetInfo
    images: np.ndarray | None = None
    labels: np.ndarray | None = None
    dataset: object = None
    num_examples: int | None = None

    def __post_init__(self):
        if (self.images is None) == (self.dataset is None):
            raise ValueError(
                "A Split needs either images and labels or a dataset, not both or neither; got "
                f"images={'set' if self.images is not None else None}, "
                f"dataset={'set' if self.dataset is not None else None}."
            )

    def as_dataset(self):
        """The split as an unbatched ``tf.data.Dataset`` of ``(uint8 image, int32 label)``."""
        tf = require("tensorflow", "data")

        if self.dataset is not None:
            return self.dataset
        return tf.data.Dataset.from_tensor_slices((self.images, self.labels.astype(np.int32)))

    def labelled_share(self, fraction, seed=0):
        """This split with ``fraction`` of each class's images (rounded, at least one), drawn
        with ``seed``: training with few labels. For a split held in memory.

        >>> info = DatasetInfo("toy", 2, ("a", "b"), (1, 1, 3))
        >>> split = Split("train", info, np.zeros((20, 1, 1, 3), np.uint8), np.repeat([0, 1], 10))
        >>> split.labelled_share(0.2).labels.tolist()
        [0, 0, 1, 1]
        """
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1]; got {fraction!r}.")
        if self.images is None:
            raise ValueError(
                f"A share of the labelled images is drawn from a split held in memory (the digits); {self.info.name}'s "
                f"{self.name} split is read as a stream."
            )
        rng = np.random.default_rng(seed)
        kept = []
        for cls in np.unique(self.labels):  # sorted: the draws in a fixed order
            members = rng.permutation(np.flatnonzero(self.labels == cls))
            kept.append(members[: max(1, int(round(len(members) * fraction)))])
        index = np.sort(np.concatenate(kept))
        return dataclasses.replace(self, images=self.images[index], labels=self.labels[index], num_examples=len(index))


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetSplits:
    """The train, validation and test splits of one dataset, with its metadata."""

    train: Split
    validation: Split
    test: Split
    info: DatasetInfo

    def __iter__(self):
        # Allows ``train, validation, test = load_dataset("digits")``.
        return iter((self.train, self.validation, self.test))


def stratified_split_indices(labels, validation_fraction=0.1, test_fraction=0.2, seed=0):
    """Seeded, stratified train/validation/test index split.

    Every class is shuffled with its own draw from ``numpy.random.default_rng(seed)`` and
    cut by the fractions (rounded per class), so each split keeps the class proportions and
    the same seed gives the same split on every machine and run. Each index array is sorted.

    Examples:
        >>> train, val, test = stratified_split_indices([0, 0, 0, 0, 1, 1, 1, 1], 0.25, 0.25)
        >>> len(train), len(val), len(test)
        (4, 2, 2)
    """
    checks.split_fractions(validation_fraction, test_fraction)
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    parts = ([], [], [])
    for cls in np.unique(labels):  # sorted, so the draws happen in a fixed order
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_test = int(round(len(members) * test_fraction))
        n_val = int(round(len(members) * validation_fraction))
        parts[2].append(members[:n_test])
        parts[1].append(members[n_test : n_test + n_val])
        parts[0].append(members[n_test + n_val :])
    return tuple(np.sort(np.concatenate(p)).astype(np.int64) for p in parts)
