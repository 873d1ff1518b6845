"""Input pipelines for keras-vit: datasets in, batched ``tf.data.Dataset`` for ``model.fit`` out.

tf.data is the input engine on every Keras backend (TensorFlow, JAX, PyTorch).

Examples:
    >>> from keras_vit.data import load_dataset, make_pipeline
    >>> splits = load_dataset("digits")  # embedded, no download
    >>> train = make_pipeline(splits.train, image_size=32, batch_size=32, training=True)
    >>> val = make_pipeline(splits.validation, image_size=32, batch_size=32, training=False)
"""

from keras_vit.data.augment import (
    make_batch_augmentation,
    make_rand_augment,
    mixes_labels,
    parse_augment_options,
)
from keras_vit.data.digits import load_digits
from keras_vit.data.folder import IMAGE_EXTENSIONS, load_image_folder
from keras_vit.data.load import load_dataset
from keras_vit.data.pipeline import make_pipeline, preprocess_split
from keras_vit.data.preprocessing import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    NORMALIZATIONS,
    normalize,
    random_flip,
    random_resized_crop,
    resize,
)
from keras_vit.data.splits import DatasetInfo, DatasetSplits, Split, stratified_split_indices
from keras_vit.data.tfds_source import UnknownDatasetError, load_tfds, tfds_names

__all__ = [
    "DatasetInfo",
    "DatasetSplits",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMAGE_EXTENSIONS",
    "NORMALIZATIONS",
    "Split",
    "UnknownDatasetError",
    "load_dataset",
    "load_digits",
    "load_image_folder",
    "load_tfds",
    "make_batch_augmentation",
    "make_pipeline",
    "make_rand_augment",
    "mixes_labels",
    "normalize",
    "parse_augment_options",
    "preprocess_split",
    "random_flip",
    "random_resized_crop",
    "resize",
    "stratified_split_indices",
    "tfds_names",
]
