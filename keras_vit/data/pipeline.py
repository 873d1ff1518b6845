"""``make_pipeline``: a split in, a batched ``tf.data.Dataset`` for ``model.fit`` out.

The order of work, and why:

1. (optional) cache the decoded source, before anything random;
2. shuffle with the seed (training), reshuffled each epoch: with ``epochs``, each epoch's
   order and its images' seeds a function of the seed and the epoch's number alone
   (``_epoch_seeds``);
3. per image, in parallel: Inception crop or plain resize, random flip. Each image gets
   its own stateless seed from ``tf.data.Dataset.random``, so parallelism cannot change
   which image gets which crop;
   Training in several processes, each keeps its part of every batch here, before any
   transform (``shard``, ``keras_vit/data/sharding.py``);
4. batch (``drop_remainder`` for a fixed batch shape, e.g. across several devices; an
   evaluation's last batch filled with blanks of weight 0 instead, ``pad_to_batches``);
5. per batch, in order (``num_parallel_calls=None``): one-hot labels, then RandAugment,
   MixUp, CutMix. These Keras layers draw from stateful seed generators, so a sequential
   map keeps their draws in a fixed order;
6. normalise (``x / 127.5 - 1`` by default), last, so augmentations see 0..255 pixels;
7. prefetch, so the next batch is prepared while the model trains.
"""

import functools
import numbers

import numpy as np

from keras_vit import checks
from keras_vit.data.augment import make_batch_augmentation, mixes_labels, parse_augment_options
from keras_vit.data.preprocessing import (
    check_normalization,
    normalize,
    random_flip,
    random_resized_crop,
    resize,
)
from keras_vit.data.sharding import check_shard, count_examples, full_batches, own_part, with_blanks
from keras_vit.data.splits import DatasetSplits, Split
from keras_vit.dependencies import require

DEFAULT_CROP_AREA_RANGE = (0.08, 1.0)


def _arrays_dataset(images, labels):
    tf = require("tensorflow", "data")

    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.dtype != np.uint8:
        raise ValueError(
            f"Expected uint8 images with values 0..255; got images of dtype {images.dtype}. "
            "Convert them, e.g. np.clip(x * 255, 0, 255).astype('uint8') for 0..1 floats."
        )
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(f"Expected images of shape (N, H, W, 1) or (N, H, W, 3); got shape {images.shape}.")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"Expected one integer label per image, shape ({len(images)},); got labels of "
            f"shape {labels.shape} and dtype {labels.dtype}."
        )
    return tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int32)))


def _tf_dataset_pairs(dataset):
    # Accepts (image, label) pairs or tfds-style {"image": ..., "label": ...} dicts.
    spec = dataset.element_spec
    if isinstance(spec, dict) and {"image", "label"} <= set(spec):
        return dataset.map(lambda example: (example["image"], example["label"]))
    if isinstance(spec, tuple) and len(spec) == 2:
        return dataset
    raise ValueError(
        "Expected a tf.data.Dataset of unbatched (image, label) pairs or of dicts with "
        f"'image' and 'label'; got element_spec={spec!r}."
    )


def _as_examples(data):
    """Returns (unbatched dataset of (uint8 RGB image, int32 label), DatasetInfo or None)."""
    tf = require("tensorflow", "data")

    if isinstance(data, DatasetSplits):
        raise ValueError(
            "Expected one split (e.g. splits.train), a (images, labels) pair or a "
            "tf.data.Dataset; got the whole DatasetSplits."
        )
    if isinstance(data, Split):
        dataset, info = data.as_dataset(), data.info
    elif isinstance(data, tf.data.Dataset):
        dataset, info = _tf_dataset_pairs(data), None
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        dataset, info = _arrays_dataset(*data), None
    else:
        raise ValueError(
            "Expected a Split (from load_dataset), an (images, labels) pair of arrays or a "
            f"tf.data.Dataset; got {type(data).__name__}."
        )

    image_spec = dataset.element_spec[0]
    if image_spec.dtype != tf.uint8:
        raise ValueError(f"Expected uint8 images with values 0..255; got a dataset of {image_spec.dtype.name} images.")
    if image_spec.shape.rank is not None and image_spec.shape.rank != 3:
        raise ValueError(f"Expected unbatched images of shape (H, W, C); got element shape {image_spec.shape}.")

    label_spec = dataset.element_spec[1]
    if not label_spec.dtype.is_integer or label_spec.shape.rank not in (0, None):
        raise ValueError(
            "Expected scalar integer class labels; got labels of dtype "
            f"{label_spec.dtype.name} and shape {label_spec.shape}."
        )
    channels = image_spec.shape[-1] if image_spec.shape.rank is not None else None
    if channels not in (1, 3, None):
        raise ValueError(f"Expected images with 1 (grey) or 3 (RGB) channels; got {channels} channels.")

    def to_rgb(image, label):
        # Grey images are repeated to 3 channels so that RGB models apply.
        if channels == 1:
            image = tf.image.grayscale_to_rgb(image)
        elif channels is None:  # not known statically: decide per image
            image = tf.cond(tf.shape(image)[-1] == 1, lambda: tf.image.grayscale_to_rgb(image), lambda: image)
            image = tf.ensure_shape(image, [None, None, 3])
        return image, tf.cast(label, tf.int32)

    return dataset.map(to_rgb, num_parallel_calls=tf.data.AUTOTUNE), info


def _check_training_options(training, shuffle_buffer, seed):
    if not isinstance(training, (bool, np.bool_)):
        raise ValueError(f"training must be True or False; got training={training!r}.")
    checks.positive_int(shuffle_buffer, "shuffle_buffer")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise ValueError(f"seed must be an integer or None; got seed={seed!r}.")


def _epoch_seeds(seed, epochs):
    """Each training epoch's seed (its shuffle's, and its images' stream of crop seeds).

    ``epochs`` None: one epoch of ``seed``, reshuffled (reproducibly) each time the dataset
    is iterated, as ``fit(epochs=n)`` on it expects. Else that many epochs, epoch ``e``'s
    seed a function of ``(seed, e)`` alone: a stream read again from its start (a
    distribution strategy's copy of the pipeline, a resumed run skipping to its epoch, a
    pipeline iterated before ``fit``) is the same stream."""
    if epochs is None:
        return [seed]
    epochs = checks.positive_int(epochs, "epochs")
    if seed is None:
        return [None] * epochs
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(epochs)]


def _stream_seeds(seed, offset, rerandomize=True):
    # An endless stream of [2] int64 seeds for stateless ops; with ``rerandomize`` a fresh
    # but reproducible stream each time it is iterated, so epochs differ.
    tf = require("tensorflow", "data")

    stream_seed = None if seed is None else seed + offset
    return tf.data.Dataset.random(seed=stream_seed, rerandomize_each_iteration=rerandomize).batch(2)


def make_pipeline(
    data,
    image_size,
    batch_size,
    training,
    *,
    num_classes=None,
    seed=0,
    normalization="vit",
    inception_crop=None,
    crop_area_range=None,
    crop_aspect_ratio_range=(3.0 / 4.0, 4.0 / 3.0),
    horizontal_flip=None,
    rand_augment=False,
    mixup_alpha=None,
    cutmix_factor=None,
    one_hot=False,
    drop_remainder=False,
    shuffle_buffer=10_000,
    cache=False,
    shard=None,
    pad_to_batches=False,
    epochs=None,
):
    """Builds the batched, prefetched ``tf.data.Dataset`` that feeds ``model.fit``.

    Works on every Keras backend (TensorFlow, JAX, PyTorch): it yields
    ``(images, labels)`` with float32 images ``(batch, height, width, 3)``, channels last.

    Args:
        data: a ``Split`` from ``load_dataset`` (its metadata supplies ``num_classes``
            and the flip / crop defaults), an ``(images, labels)`` pair of arrays (uint8
            ``(N, H, W, 1 or 3)``, integer labels), or an unbatched ``tf.data.Dataset`` of
            ``(uint8 image, label)`` pairs or ``{"image", "label"}`` dicts (e.g. from tfds).
        image_size: the model's input size, an int or ``(height, width)``.
        batch_size: images per batch.
        training: True shuffles (seeded) and applies the training transforms below;
            False resizes only, in order, never randomly (evaluation).
        num_classes: needed for one-hot labels unless ``data`` is a ``Split``.
        seed: makes shuffling and every random transform reproducible; None: not seeded.
        normalization: ``"vit"`` (``x / 127.5 - 1``, [-1, 1], original ViT checkpoints),
            ``"imagenet"`` (ImageNet mean/std, some timm checkpoints) or None (0..255).
        inception_crop: training only. True: random resized crop of ``crop_area_range``
            and ``crop_aspect_ratio_range`` (upstream pre-training); False: plain bilinear
            resize (upstream fine-tuning). Default: True when training.
        crop_area_range: fraction of the image a crop covers; default the split's
            ``info.crop_area_range`` ((0.5, 1.0) for digits), else (0.08, 1.0).
        crop_aspect_ratio_range: width / height range of a crop.
        horizontal_flip: training only: random left-right flip. Default the split's
            ``info.horizontal_flip`` (False for digits), else True.
        rand_augment: training only: False, True (``keras.layers.RandAugment`` defaults:
            2 ops, factor 0.5) or a dict with ``num_ops`` / ``factor``.
        mixup_alpha: training only: ``keras.layers.MixUp(alpha)``; None = off.
        cutmix_factor: training only: ``keras.layers.CutMix(factor)``; None = off. With
            MixUp as well, each batch gets one of the two at random.
        one_hot: labels as one-hot float32 ``(batch, num_classes)`` instead of int32
            ``(batch,)``. Forced on whenever ``mixup_alpha`` or ``cutmix_factor`` is set
            (also with ``training=False``, so training and validation pipelines built with
            the same arguments agree): mixed labels are soft, rows summing to 1, so
            compile with a categorical loss (``keras.losses.CategoricalCrossentropy``).
        drop_remainder: drop the last, smaller batch (needed for a fixed batch shape).
        shuffle_buffer: shuffle buffer size when training.
        cache: cache the decoded source in memory (before any random transform).
        shard: ``(index, count)``, training in ``count`` processes: this process's part of
            each batch of ``batch_size`` (batches of ``batch_size / count``), the rest of
            the stream skipped before it is transformed (``keras_vit/data/sharding.py``).
        pad_to_batches: evaluation only: the last batch filled to ``batch_size`` with blank
            examples, and each example's weight (1; 0 for the blanks) as the batches' third
            element, so every batch has one shape and each example counts once.
        epochs: training only: an endless stream going round that many epochs (each its
            own batches), epoch ``e`` shuffled and cropped as a function of ``seed`` and
            ``e`` alone, whatever read the pipeline before (``fit(steps_per_epoch=...)``
            reads it as one stream); None: one epoch, reshuffled each time it is iterated.

    Raises:
        ValueError: on a bad ``image_size``, ``batch_size`` or option, naming the value.

    Examples:
        >>> from keras_vit.data import load_dataset, make_pipeline
        >>> splits = load_dataset("digits")
        >>> train = make_pipeline(splits.train, image_size=32, batch_size=64, training=True)
        >>> images, labels = next(iter(train))
        >>> tuple(images.shape), images.dtype.name, tuple(labels.shape)
        ((64, 32, 32, 3), 'float32', (64,))
    """
    tf = require("tensorflow", "data")

    height, width = checks.pair(image_size)
    batch_size = checks.positive_int(batch_size, "batch_size")
    check_normalization(normalization)
    _check_training_options(training, shuffle_buffer, seed)
    crop_aspect_ratio_range = checks.fraction_range(crop_aspect_ratio_range, "crop_aspect_ratio_range", high=np.inf)
    parse_augment_options(rand_augment, mixup_alpha, cutmix_factor)  # fail early, even for eval
    label_one_hot = bool(one_hot) or mixes_labels(mixup_alpha, cutmix_factor)
    shard = check_shard(shard, batch_size)
    if pad_to_batches and training:
        raise ValueError("pad_to_batches is for evaluation (training=False); training batches are full or dropped.")
    if epochs is not None and not training:
        raise ValueError(f"epochs is for training (training=True), an evaluation reads its split once; got {epochs!r}.")

    dataset, info = _as_examples(data)
    # Shared out, a split's last partial batch is dropped whole, before the sharing: each
    # process's part of it could be full in one process and partial in another.
    cut = shard is not None and drop_remainder
    num_examples = count_examples(data, dataset) if pad_to_batches or cut else None
    if num_classes is None and info is not None:
        num_classes = info.num_classes
    if label_one_hot:
        if num_classes is None:
            raise ValueError(
                "One-hot labels (one_hot=True, mixup_alpha or cutmix_factor) need num_classes; "
                "got num_classes=None and data without metadata. Pass num_classes."
            )
        num_classes = checks.positive_int(num_classes, "num_classes")

    if inception_crop is None:
        inception_crop = training
    if crop_area_range is None:
        crop_area_range = info.crop_area_range if info is not None else DEFAULT_CROP_AREA_RANGE
    crop_area_range = checks.fraction_range(crop_area_range, "crop_area_range")
    if horizontal_flip is None:
        horizontal_flip = info.horizontal_flip if info is not None else True
    augment = (
        make_batch_augmentation(
            rand_augment=rand_augment,
            mixup_alpha=mixup_alpha,
            cutmix_factor=cutmix_factor,
            seed=None if seed is None else seed + 2,
        )
        if training
        else None
    )

    if cache:
        dataset = dataset.cache()
    per_process = batch_size // (shard[1] if shard else 1)
    if training:

        def transform(example, example_seed):
            image, label = example
            crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(example_seed, 2))
            if inception_crop:
                image = random_resized_crop(image, (height, width), crop_seed, crop_area_range, crop_aspect_ratio_range)
            else:
                image = resize(image, (height, width))
            if horizontal_flip:
                image = random_flip(image, flip_seed)
            # The crop's slice loses the static shape; the Keras layers downstream need it.
            return tf.ensure_shape(image, [height, width, 3]), label

        # Traced once, whatever the number of epochs that map it.
        transform = tf.function(transform, reduce_retracing=True)

        def epoch_batches(epoch_seed):
            examples = dataset.shuffle(shuffle_buffer, seed=epoch_seed, reshuffle_each_iteration=epochs is None)
            examples = full_batches(examples, num_examples, batch_size) if cut else examples
            examples = own_part(tf.data.Dataset.zip((examples, _stream_seeds(epoch_seed, 0, epochs is None))),
                                batch_size, shard)  # fmt: skip
            examples = examples.map(transform, num_parallel_calls=tf.data.AUTOTUNE)
            return examples.batch(per_process, drop_remainder=drop_remainder)

        dataset = functools.reduce(tf.data.Dataset.concatenate, map(epoch_batches, _epoch_seeds(seed, epochs)))
        # A run longer than its epochs (more steps an epoch than the split has batches) goes round again.
        dataset = dataset if epochs is None else dataset.repeat()
    else:
        dataset = own_part(full_batches(dataset, num_examples, batch_size) if cut else dataset, batch_size, shard)

        def transform(image, label):
            return tf.ensure_shape(resize(image, (height, width)), [height, width, 3]), label

        dataset = dataset.map(transform, num_parallel_calls=tf.data.AUTOTUNE)
        if pad_to_batches:
            dataset = with_blanks(dataset, num_examples, batch_size, shard)
        dataset = dataset.batch(per_process, drop_remainder=drop_remainder)

    if label_one_hot:
        dataset = dataset.map(lambda images, labels, *weights: (images, tf.one_hot(labels, num_classes), *weights))
    if augment is not None:
        dataset = tf.data.Dataset.zip((dataset, _stream_seeds(seed, 1, rerandomize=epochs is None)))
        # Sequential on purpose: the Keras layers' stateful seed generators must be drawn
        # in a fixed order for a seeded pipeline to repeat itself.
        dataset = dataset.map(lambda batch, batch_seed: augment(*batch, batch_seed), num_parallel_calls=None)

    dataset = dataset.map(
        lambda images, labels, *weights: (normalize(images, normalization), labels, *weights),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def preprocess_split(
    data,
    image_size,
    *,
    normalization="vit",
    num_classes=None,
    one_hot=False,
    batch_size=256,
    max_examples=None,
):
    """Returns a whole split, evaluation-preprocessed, as numpy arrays ``(images, labels)``.

    The same transform as ``make_pipeline(..., training=False)`` (bilinear resize, then
    normalisation), in the split's order: float32 images ``(N, height, width, 3)`` and
    int32 labels ``(N,)`` (float32 ``(N, num_classes)`` with ``one_hot=True``). For
    evaluation, exports and parity checks against other frameworks.

    Examples:
        >>> from keras_vit.data import load_dataset, preprocess_split
        >>> images, labels = preprocess_split(load_dataset("digits").test, 16, max_examples=10)
        >>> images.shape, float(images.min()) >= -1.0, labels.shape
        ((10, 16, 16, 3), True, (10,))
    """
    if max_examples is not None:
        max_examples = checks.positive_int(max_examples, "max_examples")
    dataset = make_pipeline(
        data,
        image_size,
        batch_size,
        training=False,
        normalization=normalization,
        num_classes=num_classes,
        one_hot=one_hot,
    )
    height, width = checks.pair(image_size)
    images, labels, count = [], [], 0
    for batch_images, batch_labels in dataset.as_numpy_iterator():
        images.append(batch_images)
        labels.append(batch_labels)
        count += len(batch_images)
        if max_examples is not None and count >= max_examples:
            break
    if not images:
        if num_classes is None and isinstance(data, Split):
            num_classes = data.info.num_classes
        empty_labels = np.zeros((0, num_classes or 0), np.float32) if one_hot else np.zeros((0,), np.int32)
        return np.zeros((0, height, width, 3), np.float32), empty_labels
    images = np.concatenate(images)[:max_examples]
    labels = np.concatenate(labels)[:max_examples]
    return images, labels
