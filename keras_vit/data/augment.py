"""Batch augmentation: Keras' RandAugment and CutMix layers, and MixUp drawn from the batch's seed.

Keras 3 image-preprocessing layers run inside tf.data on every backend (they switch to
TensorFlow ops in a tf.data graph). They draw randomness from a seeded, stateful Keras
``SeedGenerator``; applying them once per batch in a sequential map keeps the order of
draws, hence the output, fixed for a given seed.

Facts about the layers in Keras 3.15 that shape this module:

* ``RandAugment(value_range=(0, 255), num_ops=2, factor=0.5)``: ``value_range`` is the
  range of its *input* pixels, so it runs before normalisation on 0..255 floats. On a
  batch it picks its ``num_ops`` operations once per call (the same for the whole batch);
  magnitudes (angles, shifts, ...) are drawn per image, but Equalization builds one
  histogram over the whole batch. ``factor`` scales every operation: its rotation draws
  an angle in ``[0, factor * 360]`` degrees, so the default 0.5 rotates up to 180
  degrees (keep it small for digits, where 6 and 9 swap).
* ``MixUp(alpha)`` and ``CutMix(factor)`` take ``{"images": ..., "labels": ...}`` and mix
  the labels linearly, so labels must be one-hot (float) vectors; integer labels would be
  averaged into wrong class indices. CutMix draws its Beta parameter uniformly from
  ``(0, factor)``; MixUp uses Beta(alpha, alpha).

MixUp itself is ``mix_up`` here, as Keras' layer computes it but drawn from the batch's own
seed: a batch's mix is then a function of its place in a seeded stream, as its crops are,
whatever read the stream before (a resumed run skipping to its epoch, a trainer's reader
that prefetches and drops), where the layer's generator moves with every read.
"""

import keras

from keras_vit import checks
from keras_vit.dependencies import require


class _GraphSafeEqualization(keras.layers.Equalization):
    # Keras 3.15 picks the histogram code from the *global* backend: under
    # KERAS_BACKEND=jax it unrolls a 256-step Python loop even when the layer runs on
    # TensorFlow inside tf.data, where that loop is slow. Choose by the backend the layer is running on
    # instead; the arithmetic is Keras's own.
    def __init__(self, **kwargs):
        # The default name, from the class name, would start with "_": no valid TF scope.
        kwargs.setdefault("name", "graph_safe_equalization")
        super().__init__(**kwargs)

    def _custom_histogram_fixed_width(self, values, value_range, nbins):
        if self.backend.name == "jax":
            return super()._custom_histogram_fixed_width(values, value_range, nbins)
        values = self.backend.cast(values, "float32")
        value_min, value_max = (self.backend.cast(v, "float32") for v in value_range)
        scaled = (values - value_min) * (nbins - 1) / (value_max - value_min)
        indices = self.backend.numpy.clip(self.backend.cast(scaled, "int32"), 0, nbins - 1)
        return self.backend.numpy.bincount(self.backend.numpy.reshape(indices, [-1]), minlength=nbins)


def make_rand_augment(num_ops=2, factor=0.5, seed=None):
    """A ``keras.layers.RandAugment`` for float images in 0..255 (``value_range=(0, 255)``).

    Its Equalization is swapped for one that stays fast inside tf.data under the JAX
    backend (same results; see ``_GraphSafeEqualization``).

    Examples:
        >>> import numpy as np
        >>> layer = make_rand_augment(num_ops=2, factor=0.3, seed=0)
        >>> tuple(layer(np.full((2, 8, 8, 3), 128.0, np.float32), training=True).shape)
        (2, 8, 8, 3)
    """
    checks.positive_int(num_ops, "num_ops")
    layer = keras.layers.RandAugment(value_range=(0, 255), num_ops=num_ops, factor=factor, seed=seed)
    if hasattr(keras.layers.Equalization, "_custom_histogram_fixed_width"):
        layer.equalization = _GraphSafeEqualization(value_range=(0, 255))
    return layer


def _rand_augment_kwargs(rand_augment):
    # rand_augment is False/None (off), True (Keras defaults) or a dict of
    # make_rand_augment's keyword arguments.
    if rand_augment is None or rand_augment is False:
        return None
    if rand_augment is True:
        return {}
    if isinstance(rand_augment, dict) and set(rand_augment) <= {"num_ops", "factor"}:
        return dict(rand_augment)
    raise ValueError(
        "rand_augment must be False, True, or a dict with keys 'num_ops' and/or 'factor'; "
        f"got rand_augment={rand_augment!r}."
    )


def _positive_or_none(value, name, upper=None):
    if value is None:
        return None
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
    if bad or (upper is not None and value > upper):
        bounds = "a positive number" if upper is None else f"a number in (0, {upper}]"
        raise ValueError(f"{name} must be None (off) or {bounds}; got {name}={value!r}.")
    return float(value)


def parse_augment_options(rand_augment=False, mixup_alpha=None, cutmix_factor=None):
    """Checks the augmentation options; returns ``(rand_augment kwargs, alpha, factor)``.

    Each is None when off. Raises ValueError naming a bad value, so a pipeline fails
    when it is built, whether or not it trains.

    Examples:
        >>> parse_augment_options(rand_augment=True, mixup_alpha=0.2)
        ({}, 0.2, None)
    """
    return (
        _rand_augment_kwargs(rand_augment),
        _positive_or_none(mixup_alpha, "mixup_alpha"),
        # Keras's CutMix samples its Beta parameter from (0, factor), factor at most 1.
        _positive_or_none(cutmix_factor, "cutmix_factor", upper=1.0),
    )


def mixes_labels(mixup_alpha=None, cutmix_factor=None):
    """Whether MixUp or CutMix is on, i.e. whether labels must be one-hot floats.

    Examples:
        >>> mixes_labels(mixup_alpha=0.2), mixes_labels()
        (True, False)
    """
    _, alpha, factor = parse_augment_options(False, mixup_alpha, cutmix_factor)
    return alpha is not None or factor is not None


def mix_up(images, labels, alpha, seed):
    """MixUp (Zhang et al., 2018), drawn from ``seed`` (a ``[2]`` int tensor) alone: each
    image and its one-hot label blended with another of the batch's, weight ~ Beta(alpha,
    alpha) per image, as ``keras.layers.MixUp`` mixes them.

    >>> import numpy as np, tensorflow as tf
    >>> images, labels = mix_up(tf.zeros((4, 8, 8, 3)), tf.one_hot([0, 1, 2, 3], 10), 0.2, [1, 2])
    >>> np.allclose(labels.numpy().sum(axis=1), 1.0), bool(tf.reduce_all(labels == mix_up(
    ...     tf.zeros((4, 8, 8, 3)), tf.one_hot([0, 1, 2, 3], 10), 0.2, [1, 2])[1]))
    (True, True)
    """
    tf = require("tensorflow", "data")

    first, second, order = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    count = tf.shape(images)[0]
    # Beta(alpha, alpha) as the share of two Gamma(alpha) draws.
    a, b = (tf.random.stateless_gamma([count], s, alpha) for s in (first, second))
    weight = a / (a + b)
    partner = tf.argsort(tf.random.stateless_uniform([count], order))
    image_weight = tf.reshape(weight, [-1, 1, 1, 1])
    images = image_weight * images + (1.0 - image_weight) * tf.gather(images, partner)
    label_weight = tf.reshape(weight, [-1, 1])
    return images, label_weight * labels + (1.0 - label_weight) * tf.gather(labels, partner)


def make_batch_augmentation(rand_augment=False, mixup_alpha=None, cutmix_factor=None, seed=None):
    """Returns ``augment(images, labels, seed) -> (images, labels)`` for one batch.

    ``images`` are float32 ``(N, H, W, 3)`` in 0..255 and stay in that range. With MixUp
    or CutMix on, ``labels`` must be one-hot floats ``(N, num_classes)``: the layers mix
    them, so each row still sums to 1; otherwise labels pass through unchanged. ``seed``
    (a ``[2]`` int tensor) picks MixUp or CutMix per batch with probability 1/2 when both
    are on, as timm does. Returns None when every option is off.

    Examples:
        >>> import numpy as np, tensorflow as tf
        >>> augment = make_batch_augmentation(mixup_alpha=0.2, seed=0)
        >>> images, labels = augment(tf.zeros((4, 8, 8, 3)), tf.one_hot([0, 1, 2, 3], 10), [0, 0])
        >>> np.allclose(labels.numpy().sum(axis=1), 1.0)
        True
    """
    tf = require("tensorflow", "data")

    ra_kwargs, mixup_alpha, cutmix_factor = parse_augment_options(rand_augment, mixup_alpha, cutmix_factor)
    if ra_kwargs is None and mixup_alpha is None and cutmix_factor is None:
        return None

    # Distinct seeds per layer, so MixUp's and CutMix's draws are not the same numbers.
    def sub_seed(offset):
        return None if seed is None else seed + offset

    rand_aug = None if ra_kwargs is None else make_rand_augment(seed=sub_seed(0), **ra_kwargs)
    mixup = mixup_alpha is not None
    cutmix = None if cutmix_factor is None else keras.layers.CutMix(factor=cutmix_factor, seed=sub_seed(2))

    def apply_mixing(layer, images, labels):
        out = layer({"images": images, "labels": labels}, training=True)
        return tf.cast(out["images"], tf.float32), tf.cast(out["labels"], tf.float32)

    def augment(images, labels, batch_seed):
        images = tf.cast(images, tf.float32)
        labels = tf.cast(labels, tf.float32) if mixup or cutmix is not None else labels
        choice_seed, mix_seed = tf.unstack(tf.random.experimental.stateless_split(batch_seed, 2))
        if rand_aug is not None:
            images = tf.cast(rand_aug(images, training=True), tf.float32)
            images = tf.clip_by_value(images, 0.0, 255.0)
        if mixup and cutmix is not None:
            use_mixup = tf.random.stateless_uniform([], seed=choice_seed) < 0.5
            images, labels = tf.cond(
                use_mixup,
                lambda: mix_up(images, labels, mixup_alpha, mix_seed),
                lambda: apply_mixing(cutmix, images, labels),
            )
        elif mixup:
            images, labels = mix_up(images, labels, mixup_alpha, mix_seed)
        elif cutmix is not None:
            images, labels = apply_mixing(cutmix, images, labels)
        return images, labels

    return augment
