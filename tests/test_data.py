"""Input pipelines (keras_vit.data) on the current Keras backend.

Nothing here downloads: digits ships with scikit-learn, tfds datasets run under
``tfds.testing.mock_data``, image folders are written into tmp_path.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import write_photos

from keras_vit.data import (
    DatasetInfo,
    Split,
    load_dataset,
    load_image_folder,
    make_pipeline,
    make_rand_augment,
    normalize,
    preprocess_split,
    random_resized_crop,
    resize,
)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def _batches(dataset, n=None):
    dataset = dataset if n is None else dataset.take(n)
    return [(np.asarray(x), np.asarray(y)) for x, y in dataset.as_numpy_iterator()]


# --- sources -------------------------------------------------------------------------


def test_digits_split_is_stratified_fixed_uint8_rgb(digits):
    train, validation, test = digits
    assert len(train.labels) + len(validation.labels) + len(test.labels) == 1797
    assert digits.info.num_classes == 10 and digits.info.image_shape == (8, 8, 3)
    assert digits.info.horizontal_flip is False

    all_labels = np.concatenate([train.labels, validation.labels, test.labels])
    per_class = np.bincount(all_labels, minlength=10)
    for split, fraction in ((train, 0.7), (validation, 0.1), (test, 0.2)):
        assert split.images.dtype == np.uint8 and split.images.shape[1:] == (8, 8, 3)
        # Grey repeated to RGB, full 0..255 range.
        assert np.array_equal(split.images[..., 0], split.images[..., 2])
        counts = np.bincount(split.labels, minlength=10)
        assert np.all(np.abs(counts - per_class * fraction) <= 1.0), counts  # stratified
    assert train.images.max() == 255 and train.images.min() == 0

    again = load_dataset("digits")
    for a, b in zip(digits, again):
        assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)

    # The held-out test images never appear in train (the 1797 digits are all distinct).
    train_rows = {row.tobytes() for row in train.images}
    assert not any(row.tobytes() in train_rows for row in test.images)


def test_digits_split_depends_on_seed():
    a = load_dataset("digits", seed=0).test.images
    b = load_dataset("digits", seed=1).test.images
    assert a.shape == b.shape and not np.array_equal(a, b)


def test_a_share_of_the_labels_keeps_that_share_of_each_class_drawn_by_the_seed(digits, tmp_path):
    train = digits.train
    tenth = train.labelled_share(0.1, seed=0)
    counts, before = np.bincount(tenth.labels, minlength=10), np.bincount(train.labels, minlength=10)
    assert counts.tolist() == [max(1, round(n * 0.1)) for n in before] and tenth.num_examples == counts.sum()
    rows = {(row.tobytes(), int(label)) for row, label in zip(train.images, train.labels)}
    assert all((row.tobytes(), int(label)) in rows for row, label in zip(tenth.images, tenth.labels))  # its images
    assert np.array_equal(train.labelled_share(0.1, seed=0).images, tenth.images)
    assert not np.array_equal(train.labelled_share(0.1, seed=1).images, tenth.images)
    assert np.array_equal(train.labelled_share(1.0).images, train.images)
    write_photos(tmp_path)
    with pytest.raises(ValueError, match="held in memory"):
        load_image_folder(str(tmp_path)).train.labelled_share(0.5)


@pytest.mark.parametrize("name, channels", [("cifar10", 3), ("mnist", 1)])
def test_tfds_dataset_under_mock_data_feeds_batches(name, channels):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=10):
        splits = load_dataset(name)
        assert splits.info.num_classes == 10
        assert splits.info.image_shape[-1] == 3  # grey sources are repeated to RGB
        assert splits.train.name == "train"
        assert splits.info.horizontal_flip is (name != "mnist")
        pipeline = make_pipeline(splits.train, image_size=16, batch_size=4, training=True)
        batches = _batches(pipeline)
        evaluation = _batches(make_pipeline(splits.validation, 12, 4, training=False))
    assert [len(x) for x, _ in batches] == [4, 4, 2]
    for images, labels in batches:
        assert images.shape[1:] == (16, 16, 3) and images.dtype == np.float32
        assert images.min() >= -1.0 and images.max() <= 1.0
        assert labels.dtype == np.int32 and np.all((labels >= 0) & (labels < 10))
    assert evaluation[0][0].shape == (4, 12, 12, 3)


def test_unknown_name_fails_before_any_tfds_builder_with_close_names(monkeypatch):
    import tensorflow_datasets as tfds

    def no_builder(*args, **kwargs):
        raise AssertionError("tfds.builder must not run for an unknown name")

    monkeypatch.setattr(tfds, "builder", no_builder)
    with pytest.raises(ValueError, match="cifar_10") as info:
        load_dataset("cifar_10")
    assert "'cifar10'" in str(info.value)
    with pytest.raises(ValueError, match="digts") as info:
        load_dataset("digts")
    assert "'digits'" in str(info.value)


def _write_folder(root, classes, per_class=4, sizes=((10, 12), (7, 9))):
    """Images whose constant pixel value encodes the class: 40 * (index + 1)."""
    from PIL import Image

    for index, cls in enumerate(classes):
        os.makedirs(root / cls, exist_ok=True)
        for i in range(per_class):
            h, w = sizes[i % len(sizes)]
            value = 40 * (index + 1)
            if i % 2:  # grey PNGs (decoded to RGB), and RGB ones whose ".PNG" tests case
                Image.fromarray(np.full((h, w), value, np.uint8), mode="L").save(root / cls / f"{i}.png")
            else:
                Image.fromarray(np.full((h, w, 3), value, np.uint8)).save(root / cls / f"{i}.PNG")


def test_image_folder_loads_with_class_labels(tmp_path):
    _write_folder(tmp_path, ["cat", "dog", "fish"])
    splits = load_image_folder(tmp_path, validation_fraction=0.25, test_fraction=0.25)
    assert splits.info.class_names == ("cat", "dog", "fish") and splits.info.num_classes == 3
    assert [s.num_examples for s in splits] == [6, 3, 3]
    for split in splits:
        images, labels = preprocess_split(split, 8, normalization=None)
        assert images.shape == (split.num_examples, 8, 8, 3)
        # Each constant image decodes (grey as RGB) to its class's value.
        expected = np.repeat(40.0 * (labels[:, None] + 1), 3, axis=1)
        np.testing.assert_allclose(images[:, 0, 0, :], expected, atol=0.5)
        per_class = 2 if split.name == "train" else 1
        assert np.array_equal(np.bincount(labels, minlength=3), [per_class] * 3)
    # load_dataset resolves an existing directory the same way.
    assert load_dataset(str(tmp_path)).info.class_names == ("cat", "dog", "fish")


def test_presplit_image_folder_keeps_its_test_split(tmp_path):
    _write_folder(tmp_path / "train", ["a", "b"], per_class=5)
    _write_folder(tmp_path / "test", ["a", "b"], per_class=2)
    splits = load_image_folder(tmp_path, validation_fraction=0.2)
    assert splits.info.class_names == ("a", "b")
    assert [s.num_examples for s in splits] == [8, 2, 4]


def test_empty_folder_error_names_folder_and_extensions(tmp_path):
    (tmp_path / "cat").mkdir()
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(ValueError) as info:
        load_dataset(str(tmp_path))
    message = str(info.value)
    assert str(tmp_path) in message and ".png" in message and ".jpg" in message


def test_folder_with_files_that_are_not_images_is_refused_before_training(tmp_path):
    _write_folder(tmp_path, ["cat", "dog"])
    (tmp_path / "dog" / "page.jpg").write_text("<html>404 Not Found</html>")  # a failed download
    with pytest.raises(
        ValueError, match=r"1 file\(s\) named as images are not PNG, JPEG, GIF or BMP images: .*page\.jpg"
    ):
        load_image_folder(tmp_path)


def test_an_image_cut_short_is_skipped_with_a_warning_naming_it(tmp_path):
    _write_folder(tmp_path, ["cat", "dog"], per_class=6)
    whole = (tmp_path / "cat" / "0.PNG").read_bytes()
    (tmp_path / "cat" / "0.PNG").write_bytes(whole[: len(whole) // 2])  # a valid header, then nothing
    with pytest.warns(UserWarning, match=r"Skipping 1 image\(s\) cut short .*cat/0\.PNG"):
        splits = load_image_folder(tmp_path, validation_fraction=0.0, test_fraction=0.0)
    decoded = sum(1 for _ in splits.train.as_dataset())
    assert splits.train.num_examples == decoded == 11  # the rest read, no crash


def test_an_image_corrupt_inside_is_skipped_with_a_warning_naming_it(tmp_path):
    _write_folder(tmp_path, ["cat", "dog"], per_class=6)
    path = tmp_path / "dog" / "2.PNG"
    data = bytearray(path.read_bytes())
    data[40:-12] = bytes(len(data) - 52)  # whole in length and end marker, garbage inside
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"Skipping 1 image\(s\) damaged inside .*dog/2\.PNG"):
        splits = load_image_folder(tmp_path, validation_fraction=0.0, test_fraction=0.0)
    decoded = sum(1 for _ in splits.train.as_dataset())
    assert splits.train.num_examples == decoded == 11  # the rest read, no crash


def _corrupt_entropy_coded_data(path):
    """Changes one byte of a JPEG's entropy-coded data, keeping every marker in place
    (SOI, the headers, SOS, EOI): a stuffed 0xFF 0x00 pair nearest the middle of the scan
    becomes 0xFF 0xC4, so the decoder meets a marker where none may be. (Entropy-coded data
    carries no checksum, and a pre-scan of the file's structure cannot see the change.)"""
    data = bytearray(path.read_bytes())
    i = 2
    while data[i + 1] != 0xDA:  # the headers' segments, up to the start of scan
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    start, end = i + 2 + int.from_bytes(data[i + 2 : i + 4], "big"), data.rindex(b"\xff\xd9")
    stuffed = [j for j in range(start, end - 1) if data[j : j + 2] == b"\xff\x00"]
    assert stuffed, f"no stuffed byte in {path}'s scan to corrupt"
    j = min(stuffed, key=lambda j: abs(j - (start + end) // 2))
    data[j + 1] = 0xC4
    path.write_bytes(bytes(data))
    assert data[:3] == b"\xff\xd8\xff" and data.endswith(b"\xff\xd9")  # the pre-scan's signs of a whole JPEG


# The pipeline's length is unknown (a failed image is dropped when met): Keras says so when
# the epoch ends.
@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_a_jpeg_whose_entropy_coded_data_is_corrupt_is_skipped_by_the_pipeline_while_fit_runs(tmp_path):
    paths = write_photos(tmp_path)
    damaged = paths[1]  # chelsea, class "a"
    _corrupt_entropy_coded_data(damaged)
    with pytest.raises(tf.errors.InvalidArgumentError):  # it does not decode
        tf.io.decode_image(damaged.read_bytes(), channels=3, expand_animations=False)
    splits = load_image_folder(tmp_path, validation_fraction=0.0, test_fraction=0.0)
    assert splits.train.num_examples == len(paths)  # the pre-scan passed it: only decoding fails

    seen = []

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(batch)

    train = make_pipeline(splits.train, 16, 1, training=True)  # one image a step: steps are images
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(train, epochs=1, shuffle=False, verbose=0, callbacks=[Steps()])
    assert len(seen) == len(paths) - 1 and np.isfinite(history.history["loss"][0])
    # The one left out is the damaged image: class "a" lost one of its four.
    labels = np.concatenate([np.asarray(y) for _, y in train])
    assert np.bincount(labels, minlength=2).tolist() == [3, 4]


def test_folder_with_one_class_is_an_error(tmp_path):
    _write_folder(tmp_path, ["cat"])
    with pytest.raises(ValueError, match=r"has 1 class subfolder\(s\) \(cat\): a classifier needs at least two"):
        load_image_folder(tmp_path)


# --- pre-processing ------------------------------------------------------------------


def test_normalizations():
    pixels = np.array([[[0.0, 127.5, 255.0]]], np.float32)
    np.testing.assert_allclose(np.asarray(normalize(pixels, "vit")), [[[-1.0, 0.0, 1.0]]])
    imagenet = np.asarray(normalize(np.full((1, 1, 3), 255.0), "imagenet"))
    expected = (1.0 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(imagenet[0, 0], expected, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(normalize(pixels, None)), pixels)


def test_resize_and_crop_shapes_and_seeded_crop():
    image = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    assert tuple(resize(image, (12, 16)).shape) == (12, 16, 3)
    a = random_resized_crop(image, 10, seed=[1, 2])
    b = random_resized_crop(image, 10, seed=[1, 2])
    c = random_resized_crop(image, 10, seed=[3, 4])
    assert tuple(a.shape) == (10, 10, 3) and a.dtype == tf.float32
    assert np.array_equal(np.asarray(a), np.asarray(b)) and not np.array_equal(np.asarray(a), np.asarray(c))


def test_eval_pipeline_is_resize_in_order_in_vit_range(digits):
    images, labels = preprocess_split(digits.test, (16, 24), max_examples=50)
    assert images.shape == (50, 16, 24, 3) and images.dtype == np.float32
    assert images.min() >= -1.0 and images.max() <= 1.0 and images.min() < -0.99
    assert np.array_equal(labels, digits.test.labels[:50])
    expected = np.asarray(resize(digits.test.images[:50], (16, 24))) / 127.5 - 1.0
    np.testing.assert_allclose(images, expected, atol=1e-5)


def test_training_pipeline_seeded_shuffled_and_drop_remainder(digits):
    def build(seed, **kw):
        return make_pipeline(digits.train, 8, 100, training=True, seed=seed, **kw)

    first, again, other = _batches(build(7), 2), _batches(build(7), 2), _batches(build(8), 2)
    for a, b in zip(first, again):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(first[0][1], other[0][1])
    assert not np.array_equal(first[0][1], digits.train.labels[:100])  # shuffled
    sizes = [len(y) for _, y in _batches(build(0, drop_remainder=True))]
    assert sizes == [100] * (len(digits.train.labels) // 100)
    assert [len(y) for _, y in _batches(build(0))][-1] == len(digits.train.labels) % 100


def test_a_training_stream_of_epochs_is_the_same_however_often_it_is_read(digits):
    # With ``epochs``, epoch e's order and crops are a function of the seed and e alone: a
    # stream read again (a distribution strategy's copy of it, fit after a peek) is the
    # same stream, each epoch another order holding every example once (full batches).
    stream = make_pipeline(digits.train, 8, 100, training=True, seed=7, epochs=3, drop_remainder=True)
    per_epoch = len(digits.train.labels) // 100

    def read(batches):
        iterator = iter(stream)
        return [tuple(np.asarray(t) for t in next(iterator)) for _ in range(batches)]

    first, again = read(3 * per_epoch), read(3 * per_epoch)
    for (a, la), (b, lb) in zip(first, again):
        assert np.array_equal(a, b) and np.array_equal(la, lb)
    epochs = [np.concatenate([y for _, y in first[e * per_epoch : (e + 1) * per_epoch]]) for e in range(3)]
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2])
    for labels in epochs:  # each epoch its own full batches of distinct examples
        assert len(labels) == per_epoch * 100
        assert np.all(np.bincount(labels, minlength=10) <= np.bincount(digits.train.labels, minlength=10))
    # Past its epochs the stream goes round again, for a run with more steps than batches.
    assert np.array_equal(read(3 * per_epoch + 1)[-1][1], first[0][1])
    # Without epochs, one epoch, reshuffled each time it is read (fit(epochs=n) on it).
    once = make_pipeline(digits.train, 8, 100, training=True, seed=7, drop_remainder=True)
    assert not np.array_equal(next(iter(once))[1], next(iter(once))[1])
    with pytest.raises(ValueError, match="epochs is for training"):
        make_pipeline(digits.test, 8, 100, training=False, epochs=2)


def test_flip_follows_dataset_info():
    # Left half white, right half black: a flip is visible in the top-left pixel.
    image = np.zeros((8, 8, 3), np.uint8)
    image[:, :4] = 255
    images, labels = np.repeat(image[None], 64, axis=0), np.zeros(64, np.int32)
    no_flip_info = DatasetInfo("toy", 1, ("x",), (8, 8, 3), horizontal_flip=False)
    split = Split("train", no_flip_info, images=images, labels=labels)

    def top_left(data, **kw):
        pipeline = make_pipeline(data, 8, 64, training=True, inception_crop=False, normalization=None, **kw)
        return _batches(pipeline)[0][0][:, 0, 0, 0]

    assert np.all(top_left(split) == 255)  # digits-like data: no flip by default
    flipped = top_left((images, labels))  # plain arrays: flip on by default
    assert 0 < np.sum(flipped == 0) < 64


# --- augmentation --------------------------------------------------------------------


@pytest.mark.parametrize("options", [{"mixup_alpha": 0.4}, {"cutmix_factor": 1.0}])
def test_mixup_and_cutmix_give_soft_labels_summing_to_one(digits, options):
    pipeline = make_pipeline(digits.train, 16, 32, training=True, **options)
    ((images, labels),) = _batches(pipeline, 1)
    assert labels.shape == (32, 10) and labels.dtype == np.float32
    np.testing.assert_allclose(labels.sum(axis=1), 1.0, atol=1e-5)
    assert np.any((labels > 0.01) & (labels < 0.99))  # some labels really are mixed
    assert images.min() >= -1.0 and images.max() <= 1.0
    # The same options on the evaluation pipeline give one-hot, unmixed labels.
    ((_, eval_labels),) = _batches(make_pipeline(digits.validation, 16, 32, training=False, **options), 1)
    assert eval_labels.shape == (32, 10) and set(np.unique(eval_labels)) == {0.0, 1.0}


def test_rand_augment_runs_on_a_tfds_style_dataset(digits):
    # A tf.data source of {"image", "label"} dicts with grey images and no metadata:
    # RandAugment alone needs no num_classes, labels stay integers.
    grey = digits.train.images[:32, :, :, :1]
    labels = digits.train.labels[:32].astype(np.int64)
    source = tf.data.Dataset.from_tensor_slices({"image": grey, "label": labels})

    def first_batch(**options):
        return _batches(make_pipeline(source, 16, 16, training=True, seed=1, **options), 1)[0]

    plain, _ = first_batch()
    augmented, labels = first_batch(rand_augment={"num_ops": 2, "factor": 0.2})
    assert augmented.shape == plain.shape == (16, 16, 16, 3)
    assert augmented.min() >= -1.0 and augmented.max() <= 1.0
    assert not np.allclose(augmented, plain)
    assert labels.dtype == np.int32 and labels.shape == (16,)
    layer = make_rand_augment(num_ops=1, factor=0.2, seed=0)
    assert tuple(layer.value_range) == (0, 255) and layer.num_ops == 1


def test_rand_augment_equalization_matches_keras_in_tf_data():
    # make_rand_augment swaps in an Equalization whose histogram follows the backend it
    # runs on (Keras 3.15 follows the global one: a 256-step loop in tf.data under JAX).
    images = np.random.default_rng(0).integers(0, 256, (2, 8, 8, 3)).astype(np.float32)
    ours = make_rand_augment(seed=0).equalization
    in_graph = next(iter(tf.data.Dataset.from_tensors(images).map(lambda x: ours(x)))).numpy()
    reference = keras.ops.convert_to_numpy(keras.layers.Equalization(value_range=(0, 255))(images))
    np.testing.assert_allclose(in_graph, reference)
    assert not np.allclose(in_graph, images)


# --- model.fit on this backend -------------------------------------------------------


@pytest.mark.parametrize("mix", [False, True])
def test_pipeline_feeds_model_fit(digits, mix):
    options = {"mixup_alpha": 0.2, "cutmix_factor": 1.0} if mix else {}
    train = make_pipeline(digits.train, 8, 32, training=True, drop_remainder=True, **options).take(2)
    validation = make_pipeline(digits.validation, 8, 32, training=False, **options).take(1)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    loss = (
        keras.losses.CategoricalCrossentropy(from_logits=True)
        if mix
        else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    model.compile(optimizer="adam", loss=loss)
    # shuffle=False: the pipeline already shuffles (Keras warns it ignores shuffle otherwise).
    history = model.fit(train, validation_data=validation, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and np.isfinite(history.history["val_loss"][0])


# --- errors before training ----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, given",
    [
        ({"image_size": 0}, "image_size=0"),
        ({"image_size": (8,)}, "image_size=(8,)"),
        ({"image_size": (8, -2)}, "image_size=(8, -2)"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"batch_size": 2.5}, "batch_size=2.5"),
        ({"normalization": "torch"}, "normalization='torch'"),
        ({"crop_area_range": (0.0, 1.0)}, "crop_area_range=(0.0, 1.0)"),
        ({"cutmix_factor": 2.0}, "cutmix_factor=2.0"),
        ({"mixup_alpha": -1}, "mixup_alpha=-1"),
        ({"rand_augment": "strong"}, "rand_augment='strong'"),
    ],
)
@pytest.mark.parametrize("training", [True, False])
def test_bad_pipeline_arguments_name_the_value(digits, kwargs, given, training):
    arguments = {"image_size": 8, "batch_size": 4, **kwargs}
    with pytest.raises(ValueError) as info:
        make_pipeline(digits.train, training=training, **arguments)
    assert given in str(info.value)


def test_bad_inputs_name_what_was_given(tmp_path):
    with pytest.raises(ValueError, match="float64"):
        make_pipeline((np.zeros((2, 8, 8, 3)), np.zeros(2, np.int32)), 8, 2, training=False)
    with pytest.raises(ValueError, match="num_classes=None"):
        arrays = (np.zeros((2, 8, 8, 3), np.uint8), np.zeros(2, np.int32))
        make_pipeline(arrays, 8, 2, training=True, mixup_alpha=0.2)
    missing = os.path.join(str(tmp_path), "missing")
    with pytest.raises(ValueError, match="missing"):
        load_dataset(missing)
    with pytest.raises(ValueError, match="DatasetSplits"):
        make_pipeline(load_dataset("digits"), 8, 2, training=False)
