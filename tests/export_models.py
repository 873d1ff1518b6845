"""The trained tiny models tests/test_export.py exports in every format: their configs, how
they are trained (``train_for_export``), and their committed files (tests/data/export_models/,
written by tests/write_export_models.py, so that no backend trains them in its test run)."""

import contextlib
import os

import keras
import numpy as np
from helpers import TINY_ENCODER, to_numpy

import keras_vit
from keras_vit.data import IMAGENET_MEAN, IMAGENET_STD
from keras_vit.layers import ImagePreprocessing

IMAGE_SIZE = 16
# Enough for >90% test accuracy (measured: ViT ~95% after 25 epochs, the hybrid ~98% after 6).
EPOCHS = {"vit_ti16": 25, "r26_vit_s32": 6}
TINY_TASK = dict(image_size=IMAGE_SIZE, num_classes=10, **TINY_ENCODER)
TINY_VIT = dict(name="vit_ti16", patch_size=4, depth=2, gelu_approximate=False, **TINY_TASK)
# The hybrid cut to two stages of one unit (total stride 8, a 2x2 token grid at 16x16)
# and width 32, the least its GroupNorm's 32 groups allow: the same layers as R26, small.
TINY_HYBRID = dict(name="r26_vit_s32", resnet_block_units=(1, 1), resnet_width=32, depth=1, **TINY_TASK)
# The hybrid's own pre-processing: ImageNet's mean and std, and a bicubic resize 16 -> 18
# then a center crop back to 16, so that the exports' resize is exercised. (Not the ViT's:
# full-integer int8 quantises the resize too, 0.6 pixel levels of error on average instead
# of 0.3, and the tiny ViT's int8 top-1 agreement falls to 0.97 on JAX and PyTorch, where
# the hybrid's stays above 0.99.) The ViT is exported with the default normalization
# ("vit": x / 127.5 - 1).
OWN_PREPROCESSING = dict(
    crop_fraction=0.875, crop_mode="center", interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD
)
DIGIT_NAMES = [f"digit {d}" for d in range(10)]

TRAINED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "export_models")


def trained_path(name):
    return os.path.join(TRAINED, f"{name}.keras")


def preprocess(model, images):
    """What the exports do to raw images: the model's own pre-processing, else x / 127.5 - 1."""
    if model.preprocessing is not None:
        return to_numpy(model.preprocessing(images))
    return (np.asarray(images, np.float32) / 127.5 - 1.0).astype(np.float32)


@contextlib.contextmanager
def one_torch_thread():
    # Tiny matmuls: on a 2-core machine shared with other jobs a second OpenMP thread
    # spins more than it computes (measured ~7x slower training steps).
    if keras.backend.backend() != "torch":
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_for_export(config, digits):
    """The model ``config`` names, trained on the digits to ~95% test accuracy: an
    under-trained model has many near-ties between classes, where any perturbation flips
    the top-1, which would measure the model's indecision rather than the quantisation."""
    keras.utils.set_random_seed(0)
    config = dict(config)
    name = config.pop("name")
    if name == TINY_VIT["name"]:
        own = dict(class_names=DIGIT_NAMES)
    else:
        own = dict(preprocessing=ImagePreprocessing(IMAGE_SIZE, **OWN_PREPROCESSING))
    model = keras_vit.create_model(name, **config, **own)
    x_train, y_train = digits["train"]
    steps = EPOCHS[name] * -(-len(x_train) // 64)
    model.compile(
        keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(3e-3, steps)),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    with one_torch_thread():
        model.fit(preprocess(model, x_train), y_train, epochs=EPOCHS[name], batch_size=64, verbose=0)
    return model
