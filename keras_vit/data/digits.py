"""The embedded default dataset: scikit-learn's 8x8 handwritten digits (ships with sklearn).

It needs no download, so examples, tests and smoke runs work offline on any machine.
"""

import numpy as np

from keras_vit.data.splits import DatasetInfo, DatasetSplits, Split, stratified_split_indices
from keras_vit.dependencies import require

DIGITS_NAME = "digits"


def load_digits(validation_fraction=0.1, test_fraction=0.2, seed=0):
    """Loads scikit-learn's digits as uint8 RGB images with a fixed stratified split.

    The 1797 8x8 images (values 0..16) are scaled to uint8 0..255 and the grey channel is
    repeated three times, so RGB pre-trained models apply unchanged. The split is seeded
    and stratified (70/10/20 by default), so the held-out test split is the same every run.
    ``info.horizontal_flip`` is False (a mirrored digit is another symbol or none) and
    ``info.crop_area_range`` is (0.5, 1.0) (an 8% crop of an 8x8 image is about 2x2 pixels).

    Examples:
        >>> splits = load_digits()
        >>> splits.train.images.shape, splits.train.images.dtype
        ((1259, 8, 8, 3), dtype('uint8'))
        >>> len(splits.validation.labels), len(splits.test.labels), splits.info.num_classes
        (179, 359, 10)
    """
    sklearn_load_digits = require("sklearn.datasets", "data").load_digits

    bunch = sklearn_load_digits()
    # 16 is the maximum count of set pixels per 4x4 block in the original 32x32 bitmaps.
    grey = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)
    images = np.repeat(grey[..., None], 3, axis=-1)
    labels = bunch.target.astype(np.int32)

    info = DatasetInfo(
        name=DIGITS_NAME,
        num_classes=10,
        class_names=tuple(str(n) for n in bunch.target_names),
        image_shape=images.shape[1:],
        horizontal_flip=False,
        crop_area_range=(0.5, 1.0),
    )
    indices = stratified_split_indices(labels, validation_fraction, test_fraction, seed)
    train, validation, test = (
        Split(name, info, images=images[idx], labels=labels[idx], num_examples=len(idx))
        for name, idx in zip(("train", "validation", "test"), indices)
    )
    return DatasetSplits(train, validation, test, info)
