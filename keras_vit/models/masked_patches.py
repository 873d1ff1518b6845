"""Masked patch prediction: the ViT paper's self-supervised pre-training objective.

Section 4.6 and appendix B.1.2 of the paper: corrupt 50% of the patch embeddings (of
those, 80% replaced by a learned [mask] embedding, 10% by another patch's embedding, 10%
kept as they are), then predict the 3-bit mean colour of every corrupted patch (8 levels
per RGB channel: 512 classes) from its final token. Three parts, each usable alone:

- ``mean_colour_targets``: the class ids, from the pre-processed images;
- ``PatchCorruption``: the corruption, holding the [mask] embedding;
- ``MaskedPatchPrediction``: a ``VisionTransformer`` (``model.backbone``, without its
  classifier) with the corruption after its patch embedding and a 512-way head on its
  patch tokens; ``fit`` trains the objective, ``evaluate`` measures it.

The backbone's weights keep the ``VisionTransformer``'s own paths, and the saved config
holds its spec at the top level, so ``keras_vit.load_weights(vit, "mpp/model.keras")``
loads them into any ViT of that architecture (another size resampled, as from any
keras-vit file); the [mask] embedding and the head are left unused.
"""

import numbers

import keras
import numpy as np
from keras import ops

from keras_vit import checks
from keras_vit.layers.arguments import arguments_config
from keras_vit.models.graph import encode, final_norm
from keras_vit.models.self_supervised import SelfSupervisedModel
from keras_vit.models.vit import VisionTransformer

# What ``PatchCorruption`` did to each patch.
CLEAN, MASKED, RANDOM, KEPT = 0, 1, 2, 3
# Outside training the corruption is drawn from this fixed seed: ``evaluate`` measures the
# objective on the same corrupted patches every time.
EVALUATION_SEED = 1234


def mean_colour_targets(images, patch_size, mean=0.5, std=0.5, bits=3):
    """The quantised mean colour of each patch, as one class id per patch.

    The pixels are recovered in 0..1 units from the pre-processed images
    (``images * std + mean``, undoing ``(x / 255 - mean) / std``), averaged over each
    ``patch_size`` square, clipped to [0, 1] and quantised per channel to ``2 ** bits``
    equal levels: ``level = min(floor(colour * 2 ** bits), 2 ** bits - 1)``, so 0 is level
    0 and 255 the top level. The class id reads the levels as base-``2 ** bits`` digits, the
    first channel most significant: ``(r * 8 + g) * 8 + b`` for RGB at 3 bits.

    Args:
        images: ``(batch, height, width, channels)`` pre-processed images.
        patch_size: the pixels per token side (a hybrid's is ``spec.stride``).
        mean, std: the pre-processing's, in 0..1 units (one value, or one per channel):
            ``model.preprocessing.mean`` / ``.std``; 0.5 for the recipes' ``"vit"``.
        bits: bits per channel.

    Returns:
        int32 ``(batch, grid_h * grid_w)`` class ids in ``[0, 2 ** (bits * channels))``,
        row-major as the patch tokens.

    Examples:
        >>> import numpy as np
        >>> white_then_black = np.concatenate([np.ones((1, 4, 4, 3)), -np.ones((1, 4, 4, 3))], axis=2)
        >>> keras.ops.convert_to_numpy(mean_colour_targets(white_then_black, 4)).tolist()
        [[511, 0]]
    """
    levels = 2**bits
    std, mean = (ops.convert_to_tensor(np.asarray(v, "float32")) for v in (std, mean))
    x = ops.add(ops.multiply(ops.cast(images, "float32"), std), mean)
    colour = ops.average_pool(x, patch_size, strides=patch_size, padding="valid")
    level = ops.cast(ops.minimum(ops.floor(ops.clip(colour, 0.0, 1.0) * levels), levels - 1), "int32")
    ids = level[..., 0]
    for channel in range(1, level.shape[-1]):  # base-`levels` digits, the first channel first
        ids = ids * levels + level[..., channel]
    return ops.reshape(ids, (ops.shape(ids)[0], -1))


def _fraction(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1]; got {name}={value!r}.")
    return float(value)


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchCorruption(keras.layers.Layer):
    """Corrupts a fraction of the patch tokens as BERT corrupts words.

    Exactly ``floor(tokens * corrupt_fraction + 0.5)`` patches of each image are corrupted
    (the lowest ranks of uniform noise, as BERT picks a fixed number of words per sequence);
    each of those, drawn independently, is replaced by the learned [mask] embedding with
    probability ``mask_fraction``, by a random other patch's embedding (any other patch of
    the batch, uniformly) with probability ``random_fraction``, and kept otherwise (it is
    still predicted).

    In training the draws come from a ``keras.random.SeedGenerator`` (new ones each step,
    under jit too); otherwise from the fixed ``EVALUATION_SEED``, so an evaluation sees the
    same corruption every time.

    Args:
        corrupt_fraction, mask_fraction, random_fraction: the paper's 0.5, 0.8 and 0.1;
            ``1 - mask_fraction - random_fraction`` of the corrupted patches are kept.
        seed: the training draws' seed (None: from Keras' global seed).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Input: ``(batch, tokens, width)`` patch embeddings (no class token). Output: the
    corrupted tokens, and int32 ``(batch, tokens)``: ``CLEAN`` (0), ``MASKED`` (1),
    ``RANDOM`` (2) or ``KEPT`` (3) per patch.

    Examples:
        >>> import numpy as np
        >>> tokens, what = PatchCorruption(seed=0)(np.ones((2, 16, 8), "float32"), training=True)
        >>> (keras.ops.convert_to_numpy(what) != CLEAN).sum(axis=1).tolist()  # half of each image
        [8, 8]
    """

    def __init__(self, corrupt_fraction=0.5, mask_fraction=0.8, random_fraction=0.1, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.corrupt_fraction = _fraction(corrupt_fraction, "corrupt_fraction")
        self.mask_fraction = _fraction(mask_fraction, "mask_fraction")
        self.random_fraction = _fraction(random_fraction, "random_fraction")
        if self.mask_fraction + self.random_fraction > 1.0:
            raise ValueError(
                "mask_fraction + random_fraction must be at most 1 (the rest are kept); got "
                f"mask_fraction={mask_fraction!r}, random_fraction={random_fraction!r}."
            )
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape):
        # As BEiT's and timm's mask tokens: small random values, learned.
        self.mask_embedding = self.add_weight(
            name="mask_embedding",
            shape=(input_shape[-1],),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )

    def call(self, tokens, training=False):
        # Three independent draws: a training step's from the generator, else fixed ones.
        seeds = [self.seed_generator] * 3 if training else [EVALUATION_SEED + i for i in range(3)]
        shape = ops.shape(tokens)
        batch, length = shape[0], shape[1]
        draw = lambda seed: keras.random.uniform((batch, length), dtype="float32", seed=seed)  # noqa: E731
        ranks = ops.argsort(ops.argsort(draw(seeds[0]), axis=1), axis=1)
        count = ops.floor(ops.cast(length, "float32") * self.corrupt_fraction + 0.5)
        corrupted = ops.cast(ranks, "float32") < count
        choice = draw(seeds[1])
        what = ops.where(
            choice < self.mask_fraction,
            MASKED,
            ops.where(choice < self.mask_fraction + self.random_fraction, RANDOM, KEPT),
        )
        what = ops.cast(ops.where(corrupted, what, CLEAN), "int32")
        # Another patch of the batch: a uniform offset in 1 .. total - 1 from this one.
        total = batch * length
        offset = 1 + ops.cast(ops.floor(draw(seeds[2]) * ops.cast(total - 1, "float32")), "int32")
        index = (ops.arange(total, dtype="int32") + ops.reshape(offset, (-1,))) % total
        others = ops.reshape(ops.take(ops.reshape(tokens, (-1, tokens.shape[-1])), index, axis=0), shape)
        kind = what[..., None]
        mask = ops.cast(self.mask_embedding, tokens.dtype)
        tokens = ops.where(kind == MASKED, mask, ops.where(kind == RANDOM, others, tokens))
        return tokens, what

    def compute_output_shape(self, input_shape):
        return input_shape, input_shape[:2]

    def get_config(self):
        return arguments_config(self, super().get_config())


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchPrediction(SelfSupervisedModel):
    """A ViT pre-trained by masked patch prediction (the paper's section 4.6).

    Images run through the backbone's own layers with ``PatchCorruption`` right after the
    patch embedding (before the class token and the position embeddings); the final
    patch tokens (after the encoder norm) go through a Dense head to one logit per colour
    class (``mean_colour_targets``). ``compile`` takes only the optimiser and its options:
    the loss is the cross-entropy over the corrupted patches (all three kinds, the kept
    ones included), the metric ``accuracy`` the colour accuracy on them; the dataset's
    labels, if any, are unused. The targets come from the input images, with the pixel
    range recovered through ``backbone.preprocessing`` (none: the ViT's [-1, 1]).

    Corruption is random in training, and the same for the same batch shape otherwise
    (``PatchCorruption``), so ``evaluate`` measures the objective repeatably;
    ``model(images, corrupt=False)`` predicts every patch of the uncorrupted images. The
    backbone itself never corrupts: its ``feature_model()`` and a fine-tuned ViT see
    clean patches.

    Args:
        spec, dtype, preprocessing, **options: as ``VisionTransformer``'s (``name`` is this
            model's). The backbone is built without classifier and pre-logits layer
            (``include_top=False``, ``representation_size=None``): the objective reads
            the tokens, and those layers would never be trained.
        corrupt_fraction, mask_fraction, random_fraction, seed: ``PatchCorruption``'s.
        colour_bits: bits per channel of the targets (3: 512 classes for RGB).

    Call: ``model(images, training=None, corrupt=True)`` -> ``{"logits": (batch,
    patches, classes), "corruption": (batch, patches)}`` (``PatchCorruption``'s codes).

    Examples:
        >>> import numpy as np
        >>> model = MaskedPatchPrediction(image_size=16, patch_size=4, hidden_size=32, depth=1,
        ...                               num_heads=2, mlp_dim=64, seed=0)
        >>> out = model(np.zeros((2, 16, 16, 3), "float32"))
        >>> tuple(out["logits"].shape), tuple(out["corruption"].shape)
        ((2, 16, 512), (2, 16))
        >>> model.compile("adam")
        >>> sorted(model.evaluate(np.zeros((2, 16, 16, 3), "float32"), verbose=0, return_dict=True))
        ['accuracy', 'loss']
    """

    OWN_TERMS = "its own loss and accuracy (on the corrupted patches)"

    def __init__(
        self,
        spec=None,
        dtype=None,
        preprocessing=None,
        corrupt_fraction=0.5,
        mask_fraction=0.8,
        random_fraction=0.1,
        colour_bits=3,
        seed=None,
        **options,
    ):
        keras_options = {k: options.pop(k) for k in ("name", "trainable") if k in options}
        no_top = {"include_top": False, "representation_size": None}
        backbone = VisionTransformer(spec, dtype, preprocessing, name="backbone", **{**options, **no_top})
        policy = backbone.dtype_policy
        super().__init__(dtype=policy, **keras_options)
        self.backbone = backbone
        self.colour_bits = checks.positive_int(colour_bits, "colour_bits")
        spec = backbone.spec
        # Built here, outside any name scope, so their paths are short and fixed
        # ("patch_corruption/mask_embedding", "mpp_head/kernel") like the backbone's.
        self.corruption = PatchCorruption(
            corrupt_fraction, mask_fraction, random_fraction, seed, name="patch_corruption", dtype=policy
        )
        self.corruption.build((None, None, spec.hidden_size))
        # Under mixed precision the head computes in float32, as the ViT's, for a stable loss.
        mixed = policy.compute_dtype != policy.variable_dtype
        classes = 2 ** (self.colour_bits * spec.num_channels)
        self.head = keras.layers.Dense(classes, name="mpp_head", dtype="float32" if mixed else policy)
        self.head.build((None, None, spec.hidden_size))
        self.colour_accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        # The mean over the corrupted patches; scaled per replica under tf.distribute.
        self._objective = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        )
        self.built = True

    def call(self, images, training=None, corrupt=True):
        layers = self.backbone.layers_by_role
        # The ViT's own forward pass, with the step that yields the patch tokens (the
        # embedding, flattened for a dynamic-size model) followed by the corruption.
        step = "patch_flatten" if layers["patch_flatten"] is not None else "patch_embedding"
        corruption = []

        def embed_and_corrupt(x):
            tokens = layers[step](x)
            if corrupt:
                tokens, what = self.corruption(tokens, training=training)
            else:
                what = ops.zeros(ops.shape(tokens)[:2], "int32")
            corruption.append(what)
            return tokens

        tokens, _ = encode(dict(layers, **{step: embed_and_corrupt}), images)
        if not self.backbone.spec.norm_after_pool:  # else the norm is the pooled vector's
            tokens = final_norm(layers, tokens)
        tokens = tokens[:, self.backbone.spec.num_prefix_tokens :]
        return {"logits": self.head(tokens), "corruption": corruption[0]}

    def colour_targets(self, images):
        """``mean_colour_targets`` of pre-processed images, with this model's pre-processing."""
        mean, std = self.pixel_scale()
        return mean_colour_targets(images, self.backbone.spec.stride, mean, std, self.colour_bits)

    def _targets_and_weights(self, x, y_pred, sample_weight):
        weights = ops.cast(y_pred["corruption"] != CLEAN, "float32")
        if sample_weight is not None:
            weights = weights * ops.reshape(ops.cast(sample_weight, "float32"), (-1, 1))
        return self.colour_targets(x), weights

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        targets, weights = self._targets_and_weights(x, y_pred, sample_weight)
        return self.with_regularisers(self._objective(targets, y_pred["logits"], sample_weight=weights))

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        targets, weights = self._targets_and_weights(x, y_pred, sample_weight)
        self.colour_accuracy.update_state(targets, y_pred["logits"], sample_weight=weights)
        return self.get_metrics_result()

    def get_config(self):
        return self.config_with(
            corrupt_fraction=self.corruption.corrupt_fraction,
            mask_fraction=self.corruption.mask_fraction,
            random_fraction=self.corruption.random_fraction,
            colour_bits=self.colour_bits,
            seed=self.corruption.seed,
        )
