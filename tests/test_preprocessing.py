"""ImagePreprocessing: PIL's resize, timm's crop and normalisation, on every backend.

The reference is the evaluation transform of timm and torchvision written out with PIL
(``Image.resize``, then the center crop, then ``(x / 255 - mean) / std``), run on real
photos: scikit-learn's embedded sample images (no download).
"""

import keras
import numpy as np
import pytest
from helpers import pil_reference, to_numpy

from keras_vit.data.preprocessing import IMAGENET_MEAN, IMAGENET_STD
from keras_vit.layers import ImagePreprocessing

# PIL rounds its 8-bit result to integers after each of its two passes (width, then
# height); the layer keeps floats. So they differ by up to half a level from the final
# rounding plus half a level, carried through the height filter's weights, from the
# intermediate one: measured at most 1.06 levels (bicubic) and 1.00 (bilinear), 0.25 to
# 0.35 on average (more when upsampling), the same on every backend over the cases below.
MAX_LEVELS = 1.25
MEAN_LEVELS = 0.4
# Sizes known only at run time (tf.data on images of varying sizes): the same weights in
# float32, measured at most 9e-4 levels from the static path.
DYNAMIC_LEVELS = 5e-3


@pytest.fixture(scope="module")
def photo():
    from sklearn.datasets import load_sample_image

    return load_sample_image("china.jpg")  # (427, 640, 3) uint8


def levels(normalised, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Back from (x / 255 - mean) / std to 0..255 pixel levels."""
    return (np.asarray(normalised, np.float64) * np.asarray(std) + np.asarray(mean)) * 255.0


# (source crop of the photo, output size, crop_fraction, crop_mode): downsampling the whole
# photo, upsampling a small crop of it, square and non-square.
CASES = [
    pytest.param((slice(None), slice(None)), 48, 0.875, "center", id="down-center"),
    pytest.param((slice(None), slice(None)), (40, 56), 0.9, "squash", id="down-squash"),
    pytest.param((slice(100, 124), slice(200, 240)), 32, 0.875, "center", id="up-center"),
    pytest.param((slice(100, 124), slice(200, 240)), (36, 52), 1.0, "squash", id="up-squash"),
]


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
@pytest.mark.parametrize("region, size, crop_fraction, crop_mode", CASES)
def test_matches_pil_within_a_level(photo, region, size, crop_fraction, crop_mode, interpolation):
    image = np.ascontiguousarray(photo[region])
    layer = ImagePreprocessing(
        size,
        crop_fraction=crop_fraction,
        crop_mode=crop_mode,
        interpolation=interpolation,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
    )
    got = levels(to_numpy(layer(image[None]))[0])
    expected = pil_reference(image, size, crop_fraction, crop_mode, interpolation)
    assert got.shape == expected.shape
    diff = np.abs(got - expected)
    print(f"{interpolation} {image.shape} -> {size}: max {diff.max():.3f} mean {diff.mean():.3f} levels")
    assert diff.max() <= MAX_LEVELS and diff.mean() <= MEAN_LEVELS, (diff.max(), diff.mean())


@pytest.mark.parametrize("region, size, crop_fraction, crop_mode", CASES)
def test_nearest_picks_pils_pixels(photo, region, size, crop_fraction, crop_mode):
    image = np.ascontiguousarray(photo[region])
    layer = ImagePreprocessing(size, crop_fraction, crop_mode, interpolation="nearest", mean=0.0, std=1 / 255)
    got = to_numpy(layer(image))  # one image, no batch
    np.testing.assert_allclose(got, pil_reference(image, size, crop_fraction, crop_mode, "nearest"), atol=1e-3)


def test_image_of_the_output_size_is_only_normalised(rng):
    images = rng.integers(0, 256, (2, 16, 24, 3), dtype=np.uint8)
    layer = ImagePreprocessing((16, 24), mean=IMAGENET_MEAN, std=IMAGENET_STD)
    expected = (images / 255.0 - np.asarray(IMAGENET_MEAN)) / np.asarray(IMAGENET_STD)
    got = to_numpy(layer(images))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_from_normalization_names(rng):
    images = rng.integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)
    np.testing.assert_allclose(
        to_numpy(ImagePreprocessing.from_normalization("vit", 8)(images)), images / 127.5 - 1, atol=1e-6
    )
    np.testing.assert_allclose(to_numpy(ImagePreprocessing.from_normalization(None, 8)(images)), images, atol=1e-4)
    imagenet = ImagePreprocessing.from_normalization("imagenet", 8)
    assert (imagenet.mean, imagenet.std) == (IMAGENET_MEAN, IMAGENET_STD)
    # The recipes' evaluation transform: a plain bilinear resize, as keras_vit.data.resize.
    assert (imagenet.crop_mode, imagenet.interpolation, imagenet.antialias) == ("squash", "bilinear", False)
    with pytest.raises(ValueError, match="normalization must be one of"):
        ImagePreprocessing.from_normalization("inception", 8)


@pytest.mark.parametrize("shape", [(12, 20), (40, 28)], ids=["up", "down"])
def test_from_normalization_is_the_recipes_evaluation_transform(rng, shape):
    from keras_vit.data import normalize, resize

    images = rng.integers(0, 256, (2, *shape, 3), dtype=np.uint8)
    expected = normalize(resize(images, (16, 16)), "vit").numpy()  # tf.image.resize, bilinear
    got = to_numpy(ImagePreprocessing.from_normalization("vit", 16)(images))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_config_round_trip(rng):
    layer = ImagePreprocessing(
        (12, 20), crop_fraction=0.9, interpolation="bilinear", antialias=False, mean=IMAGENET_MEAN, std=IMAGENET_STD
    )
    config = layer.get_config()
    assert config["image_size"] == [12, 20] and config["mean"] == list(IMAGENET_MEAN)
    images = rng.integers(0, 256, (2, 30, 40, 3), dtype=np.uint8)
    for copy in (
        ImagePreprocessing.from_config(config),
        keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer)),
    ):
        assert type(copy) is ImagePreprocessing and copy.get_config() == config
        np.testing.assert_array_equal(to_numpy(copy(images)), to_numpy(layer(images)))


def test_in_a_functional_model(rng):
    layer = ImagePreprocessing(16, crop_fraction=0.875)
    inputs = keras.Input((None, None, 3), dtype="uint8")
    model = keras.Model(inputs, layer(inputs))
    assert model.output_shape == (None, 16, 16, 3)
    images = rng.integers(0, 256, (2, 20, 30, 3), dtype=np.uint8)
    np.testing.assert_allclose(to_numpy(model(images)), to_numpy(layer(images)), atol=1e-6)


def test_in_tf_data(rng):
    import tensorflow as tf

    layer = ImagePreprocessing(16, crop_fraction=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    images = rng.integers(0, 256, (3, 20, 30, 3), dtype=np.uint8)
    batches = list(tf.data.Dataset.from_tensor_slices(images).batch(2).map(layer))
    assert [tuple(b.shape) for b in batches] == [(2, 16, 16, 3), (1, 16, 16, 3)]
    np.testing.assert_allclose(np.concatenate([b.numpy() for b in batches]), to_numpy(layer(images)), atol=1e-5)

    # Unbatched images of different sizes: the sizes are known only at run time.
    varying = [images[0], images[1, :12], images[2, :, :17]]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(varying), output_signature=tf.TensorSpec((None, None, 3), tf.uint8)
    )
    for got, image in zip(dataset.map(layer), varying):
        diff = np.abs(levels(got.numpy()) - levels(to_numpy(layer(image)))).max()
        assert got.shape == (16, 16, 3) and diff <= DYNAMIC_LEVELS, diff


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(image_size=0), "image_size must be a positive integer"),
        (dict(image_size=(16, 16, 3)), "image_size must be a positive integer or a pair"),
        (dict(crop_fraction=0.0), r"crop_fraction must be a number in \(0, 1\]"),
        (dict(crop_fraction=1.2), r"crop_fraction must be a number in \(0, 1\].*got crop_fraction=1.2"),
        (dict(crop_mode="border"), r"crop_mode must be one of \('center', 'squash'\); got crop_mode='border'"),
        (dict(interpolation="lanczos"), "interpolation must be one of .*got interpolation='lanczos'"),
        (dict(antialias="yes"), "antialias must be True or False"),
        (dict(mean=(0.5, "a", 0.5)), "mean must be one or one per channel of numbers"),
        (
            dict(std=(0.5, 0.0, 0.5)),
            r"std must be one or one per channel of positive numbers.*got std=\(0.5, 0.0, 0.5\)",
        ),
        (dict(mean=(0.5, 0.5), std=(0.5, 0.5, 0.5)), "mean and std must have one value per channel"),
    ],
)
def test_bad_arguments_name_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ImagePreprocessing(**{"image_size": 16, **kwargs})


def test_bad_inputs_name_the_shape():
    layer = ImagePreprocessing(8)
    with pytest.raises(ValueError, match=r"Expected images of shape .*got shape \(8, 8\)"):
        layer(np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match=r"Expected images with 3 channels .*got shape \(1, 8, 8, 4\)"):
        layer(np.zeros((1, 8, 8, 4), np.uint8))


def _fed_to_the_model(model, images):
    """What ``model.classify`` passes to ``model.predict``."""
    fed = []
    predict = model.predict
    model.predict = lambda batch, **kwargs: fed.append(to_numpy(batch)) or predict(batch, **kwargs)
    try:
        model.classify(images)
    finally:
        del model.predict
    return fed[0]


@pytest.mark.parametrize(
    "preprocessing",
    [
        pytest.param(
            dict(crop_fraction=0.875, interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD), id="preset"
        ),
        pytest.param(dict(crop_mode="squash", interpolation="bilinear", antialias=False), id="recipe"),
    ],
)
def test_resize_for_model_is_what_classify_feeds_the_model_before_its_mean_and_std(photo, preprocessing):
    import keras_vit
    from keras_vit.images import resize_for_model

    layer = ImagePreprocessing(24, **preprocessing)
    model = keras_vit.create_model("vit_ti16", image_size=24, patch_size=8, depth=1, num_classes=3, preprocessing=layer)
    images = [photo[:200, :300], photo[100:140, 200:260]]  # two sizes, downsampled and upsampled
    pixels = resize_for_model(images, model)
    assert pixels.shape == (2, 24, 24, 3) and pixels.dtype == np.uint8
    fed = _fed_to_the_model(model, images)
    # The same pixels, but for their rounding to whole levels.
    np.testing.assert_allclose(pixels, levels(fed, layer.mean, layer.std), atol=0.5 + 1e-3)
    np.testing.assert_array_equal(resize_for_model(images[1], model), pixels[1])  # one image alone


def test_resize_for_model_then_the_models_own_preprocessing_is_classify_for_a_whole_image_model(photo):
    # A model the recipes train keeps the whole image (crop_fraction 1): on pixels at its size
    # its pre-processing only normalises, so an export's uint8 input answers as classify does.
    from keras_vit.images import resize_for_model

    layer = ImagePreprocessing.from_normalization("vit", 24)
    got = to_numpy(layer(resize_for_model(photo, layer)[None]))
    expected = to_numpy(layer(photo[None]))
    np.testing.assert_allclose(got, expected, atol=0.5 / 127.5 + 1e-5)


def test_resize_for_model_refuses_a_model_without_preprocessing():
    import keras_vit
    from keras_vit.images import resize_for_model

    model = keras_vit.create_model("vit_ti16", image_size=16, depth=1, num_classes=3)
    with pytest.raises(ValueError, match="Expected a keras-vit model with its pre-processing.*preprocessing is None"):
        resize_for_model(np.zeros((16, 16, 3), np.uint8), model)


def test_a_grey_image_is_classified_as_its_three_channel_copy_and_another_channel_count_names_its_shape(photo):
    # PIL's convert("RGB") and timm's loader repeat a grey channel three times: so does classify.
    import keras_vit

    layer = ImagePreprocessing(16, crop_fraction=0.875)
    model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=8, depth=1, num_classes=3, preprocessing=layer)
    grey = photo[:120, :160].mean(axis=-1).astype(np.uint8)
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    expected = model.classify(rgb)
    for given in (grey, grey[..., None], [grey], grey[None, ..., None]):
        np.testing.assert_array_equal(model.classify(given), expected)
    with pytest.raises(ValueError, match=r"got shape \(120, 160, 4\)"):  # the input's own, not a resized one's
        model.classify(np.concatenate([rgb, rgb[..., :1]], axis=-1))
