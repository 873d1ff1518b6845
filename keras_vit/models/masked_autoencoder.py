"""Masked autoencoders (He et al., "Masked Autoencoders Are Scalable Vision Learners", 2022).

Hide most of each image's patches (75%), encode the visible ones only, and reconstruct the
hidden pixels with a small decoder of its own width and depth; the loss is the mean squared
error on the hidden patches, against pixels normalised per patch. The encoder is the ViT
itself (``model.backbone``, without its classifier), so its weights keep the
``VisionTransformer``'s paths and the saved file fine-tunes like any pre-trained ViT; the
decoder is kept beside it, for reconstructions and for pre-training on. The arithmetic on
patches (patchify, the targets, the masking, the loss) is ``keras_vit.models.patch_masking``;
here:

- ``MaskTokens``: the decoder's [mask] tokens for the hidden patches;
- ``MaskedAutoencoder``: the model; ``fit`` trains the objective, ``evaluate`` measures it.
"""

import keras
import numpy as np
from keras import ops

from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.layer_norm import make_norm
from keras_vit.layers.tokens import AddedTokens, PositionEmbedding, sincos_2d_position_embedding
from keras_vit.models.graph import embed, final_norm
from keras_vit.models.mae_spec import MAESpec
from keras_vit.models.patch_masking import (
    gather_tokens,
    patch_mean_and_scale,
    patchify,
    pixel_targets,
    random_masking,
    unpatchify,
    visible_count,
)
from keras_vit.models.self_supervised import SelfSupervisedModel
from keras_vit.models.spec import ViTSpec
from keras_vit.models.vit import VisionTransformer

# Outside training the masks are drawn from this fixed seed: ``evaluate`` measures the
# objective on the same hidden patches every time.
EVALUATION_SEED = 4321


def mae_position_table(grid_size, width, num_prefix_tokens):
    """MAE's fixed 2-D sine-cosine table, ``(1, prefix + rows * cols, width)``, the prefix
    rows zero: the columns' sines and cosines then the rows', frequencies
    ``10000 ** -(i / (width / 4))`` (MAE's ``get_2d_sincos_pos_embed``, which its checkpoints
    store)."""
    table = sincos_2d_position_embedding(grid_size, width, form="mae")
    return np.concatenate([np.zeros((num_prefix_tokens, width), "float32"), table])[None]


def check_options(spec, mae_spec):
    """Raises ``ValueError`` for what a masked autoencoder of ``mae_spec`` (a ``MAESpec``)
    cannot be on this encoder (the recipes call it before any step)."""
    _refuse_unbuildable(spec)
    patches = spec.grid_size[0] * spec.grid_size[1]
    if visible_count(patches, mae_spec.mask_ratio) < 1:
        raise ValueError(
            f"mask_ratio={mae_spec.mask_ratio!r} hides all {patches} patches of a {spec.grid_size} grid: "
            "expected a ratio that keeps at least one."
        )


def _refuse_unbuildable(spec):
    """MAE encodes a subset of the patch tokens: what a spec needs that the subset breaks."""
    why = None
    if spec.resnet is not None:
        why = ("a hybrid's ResNet stem convolves across patch borders, so every visible token would carry "
               "pixels of the hidden patches around it and the reconstruction would not be a prediction")  # fmt: skip
    elif spec.rope:
        why = "its rotary embeddings are tables over the whole grid, not built for a subset of the patches"
    elif spec.relative_position_bias:
        why = "its relative position bias is a table over the whole grid, not built for a subset of the patches"
    elif spec.dynamic_image_size:
        why = "MAE pre-trains at one size (the decoder's position table is the grid's): build it without " \
              "dynamic_image_size; the saved encoder loads into a dynamic model"  # fmt: skip
    elif spec.position_embedding != "learned":
        why = (f"MAE adds its fixed sine-cosine table where the ViT's learned one is (position_embedding "
               f"'learned'); this spec has {spec.position_embedding!r}")  # fmt: skip
    if why:
        raise ValueError(f"A masked autoencoder cannot be built on this ViT: {why}.")


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskTokens(AddedTokens):
    """Appends ``count`` copies of one learned [mask] token to the tokens: the decoder's
    stand-ins for the hidden patches. Its weight is ``token``, shape ``(1, 1, width)``.

    Examples:
        >>> import numpy as np
        >>> tuple(MaskTokens(3)(np.zeros((2, 4, 8), "float32")).shape)
        (2, 7, 8)
    """

    PREPEND = False

    def build(self, input_shape):
        # As MAE's: small random values, learned.
        self.token = self.add_weight(
            name="token", shape=(1, 1, input_shape[-1]), initializer=keras.initializers.RandomNormal(stddev=0.02)
        )

    def added(self):
        return self.token


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedAutoencoder(SelfSupervisedModel):
    """A ViT pre-trained as a masked autoencoder (MAE).

    Each image's patch tokens get the encoder's position table (MAE's fixed sine-cosine
    one, not trained here; a fine-tuned ViT trains it as a learned table); ``mask_ratio``
    of them are dropped at random (``random_masking``) and the encoder's blocks and final
    norm run on the class token and the visible rest. The decoder projects those to its
    width, puts a learned [mask] token at every hidden patch, adds its own fixed
    sine-cosine table, runs its blocks and norm and predicts each patch's pixels
    (``patch_size ** 2 * channels``). ``compile`` takes only the optimiser and its options:
    the loss is ``reconstruction_loss`` against ``pixel_targets`` of the input (the
    pre-processed images), over the hidden patches.

    Masks are random in training, and the same for the same batch shape otherwise (so
    ``evaluate`` measures the objective repeatably); ``model(images, noise=...)`` takes
    them from given ``(batch, patches)`` noise, as transformers' ``ViTMAEForPreTraining``.

    Args:
        spec, dtype, preprocessing, **options: as ``VisionTransformer``'s (``name`` is this
            model's); the backbone is built without classifier and pre-logits layer.
            A hybrid, a RoPE or relative-position-bias model and a dynamic-size one are
            refused, saying why.
        mae_spec: a ``MAESpec`` (or its fields as a dict): the mask ratio, the decoder and the
            loss's form; its fields may also be given one by one among ``options``
            (``decoder_width=256``).
        seed: the training masks' seed (None: from Keras' global seed).

    Call: ``model(images, training=None, noise=None)`` -> ``{"predictions": (batch,
    patches, pixels per patch), "mask": (batch, patches)}``, 1 in ``mask`` where hidden.

    Examples:
        >>> import numpy as np
        >>> model = MaskedAutoencoder(image_size=16, patch_size=4, hidden_size=32, depth=1, num_heads=2,
        ...                           mlp_dim=64, decoder_width=16, decoder_depth=1, decoder_heads=2, seed=0)
        >>> out = model(np.zeros((2, 16, 16, 3), "float32"))
        >>> tuple(out["predictions"].shape), keras.ops.convert_to_numpy(out["mask"]).sum(axis=1).tolist()
        ((2, 16, 48), [12.0, 12.0])
        >>> model.compile("adam")
        >>> sorted(model.evaluate(np.zeros((2, 16, 16, 3), "float32"), verbose=0, return_dict=True))
        ['loss']
    """

    OWN_TERMS = "its own loss (the reconstruction of the hidden patches)"

    def __init__(self, spec=None, dtype=None, preprocessing=None, mae_spec=None, seed=None, **options):
        keras_options = {k: options.pop(k) for k in ("name", "trainable") if k in options}
        own = {k: options.pop(k) for k in MAESpec.names() if k in options}
        mae_spec = mae_spec if isinstance(mae_spec, MAESpec) else MAESpec(**(mae_spec or {}))
        mae_spec = mae_spec.replace(**own)
        no_top = {"include_top": False, "representation_size": None}
        spec = (spec if isinstance(spec, ViTSpec) else ViTSpec.from_config(spec or {})).replace(**{**options, **no_top})
        check_options(spec, mae_spec)  # before anything is built
        backbone = VisionTransformer(spec, dtype, preprocessing, name="backbone")
        policy = backbone.dtype_policy
        super().__init__(dtype=policy, **keras_options)
        self.backbone = backbone
        self.mae_spec = mae_spec
        self.num_patches = spec.grid_size[0] * spec.grid_size[1]
        self.num_visible = visible_count(self.num_patches, mae_spec.mask_ratio)
        width, depth, heads = mae_spec.decoder_width, mae_spec.decoder_depth, mae_spec.decoder_heads
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        prefix = spec.num_prefix_tokens
        # MAE's encoder table: fixed sine-cosine values, not trained in pre-training.
        position = backbone.layers_by_role["position_embedding"]
        position.embedding.assign(mae_position_table(spec.grid_size, spec.hidden_size, position.num_prefix_tokens))
        position.trainable = False
        # Built here, outside any name scope, so that their paths are short and fixed
        # ("decoder_embed/kernel", "decoder_block_0/...") beside the backbone's.
        self.decoder_embed = keras.layers.Dense(width, name="decoder_embed", dtype=policy)
        self.decoder_embed.build((None, None, spec.hidden_size))
        self.mask_tokens = MaskTokens(self.num_patches - self.num_visible, name="mask_token", dtype=policy)
        self.mask_tokens.build((None, None, width))
        self.decoder_position = PositionEmbedding(spec.grid_size, prefix, name="decoder_position_embedding",
                                                  dtype=policy)  # fmt: skip
        self.decoder_position.build((None, prefix + self.num_patches, width))
        self.decoder_position.embedding.assign(mae_position_table(spec.grid_size, width, prefix))
        self.decoder_position.trainable = False
        self.decoder_blocks = []
        for i in range(depth):
            block = EncoderBlock(
                heads, mae_spec.mlp_dim, attention_options=dict(qkv_bias=spec.qkv_bias),
                mlp_options=dict(gelu_approximate=spec.gelu_approximate), norm_type=spec.norm_type,
                layer_norm_epsilon=spec.layer_norm_epsilon, name=f"decoder_block_{i}", dtype=policy,
            )  # fmt: skip
            block.build((None, prefix + self.num_patches, width))
            self.decoder_blocks.append(block)
        self.decoder_norm = make_norm(spec.norm_type, spec.layer_norm_epsilon, name="decoder_norm", dtype=policy)
        self.decoder_norm.build((None, None, width))
        # Under mixed precision the prediction computes in float32, as a ViT's head, for a stable loss.
        mixed = policy.compute_dtype != policy.variable_dtype
        pixels = spec.stride**2 * spec.num_channels
        self.decoder_pred = keras.layers.Dense(pixels, name="decoder_pred", dtype="float32" if mixed else policy)
        self.decoder_pred.build((None, None, width))
        # The mean over the hidden patches; scaled per replica under tf.distribute.
        self._objective = keras.losses.MeanSquaredError(reduction="mean_with_sample_weight")
        self.built = True

    @property
    def spec(self):
        return self.backbone.spec

    def masking(self, batch, training=False, noise=None):
        """``random_masking`` of a batch: from ``noise``, else from the seed generator in
        training and from ``EVALUATION_SEED`` otherwise."""
        if noise is None:
            seed = self.seed_generator if training else EVALUATION_SEED
            noise = keras.random.uniform((batch, self.num_patches), dtype="float32", seed=seed)
        return random_masking(noise, self.num_visible)

    def encode(self, images, kept):
        """The encoder on the visible patches: ``(batch, prefix + keep, width)`` after its final norm."""
        layers = self.backbone.layers_by_role
        x, _ = embed(layers, images)
        prefix = self.spec.num_prefix_tokens
        x = ops.concatenate([x[:, :prefix], gather_tokens(x[:, prefix:], kept)], axis=1)
        for block in layers["blocks"]:
            x = block(x)
        if not self.spec.norm_after_pool:  # else the norm is the pooled vector's
            x = final_norm(layers, x)
        return x

    def decode(self, latent, restore):
        """The decoder: the encoder's tokens and the grid order -> each patch's predicted pixels."""
        prefix = self.spec.num_prefix_tokens
        x = self.decoder_embed(latent)
        patches = gather_tokens(self.mask_tokens(x[:, prefix:]), restore)
        x = self.decoder_position(ops.concatenate([x[:, :prefix], patches], axis=1))
        for block in self.decoder_blocks:
            x = block(x)
        return self.decoder_pred(self.decoder_norm(x))[:, prefix:]

    def call(self, images, training=None, noise=None):
        kept, restore, mask = self.masking(ops.shape(images)[0], training=bool(training), noise=noise)
        return {"predictions": self.decode(self.encode(images, kept), restore), "mask": mask}

    def targets(self, images):
        """``pixel_targets`` of pre-processed images, with this model's patch size and ``norm_pix_loss``."""
        return pixel_targets(images, self.spec.stride, self.mae_spec.norm_pix_loss)

    def reconstruct(self, images, noise=None):
        """The decoder's reconstruction of pre-processed images, in their units:
        ``{"reconstruction": the visible patches as they are, the decoder's pixels in the
        hidden ones (its normalised predictions scaled back with each patch's own mean and
        deviation), "hidden": (batch, height, width, 1), 1 in the hidden patches' pixels,
        "losses": (batch,) each image's reconstruction loss on its hidden patches}``.
        The masks are the evaluation's (or from ``noise``)."""
        out = self(images, training=False, noise=noise)
        stride, grid, channels = self.spec.stride, self.spec.grid_size, self.spec.num_channels
        patches = ops.cast(patchify(images, stride), "float32")
        predicted = ops.cast(out["predictions"], "float32")
        targets = self.targets(images)
        hidden = out["mask"]
        errors = ops.mean(ops.square(predicted - targets), axis=-1)
        losses = ops.sum(errors * hidden, axis=1) / ops.sum(hidden, axis=1)
        if self.mae_spec.norm_pix_loss:  # back to the patch's own mean and deviation
            mean, scale = patch_mean_and_scale(patches)
            predicted = predicted * scale + mean
        hidden = hidden[..., None]
        filled = unpatchify(patches * (1 - hidden) + predicted * hidden, stride, grid, channels)
        hidden_pixels = unpatchify(ops.repeat(hidden, stride * stride, axis=-1), stride, grid, 1)
        return {"reconstruction": filled, "hidden": hidden_pixels, "losses": losses}

    def reconstruct_images(self, images, noise=None):
        """``reconstruct`` as 0..255 pictures, the pre-processing undone: ``(masked,
        reconstruction)``, numpy, the masked images' hidden patches black."""
        out = {k: ops.convert_to_numpy(v) for k, v in self.reconstruct(images, noise).items()}
        mean, std = (np.asarray(v, "float32") for v in self.pixel_scale())
        pixels = lambda x: np.clip((np.asarray(x, "float32") * std + mean) * 255.0, 0.0, 255.0)  # noqa: E731
        return pixels(ops.convert_to_numpy(images)) * (1 - out["hidden"]), pixels(out["reconstruction"])

    def reconstruction_losses(self, images, noise=None):
        """Each image's reconstruction loss on its hidden patches (numpy, ``(batch,)``)."""
        return ops.convert_to_numpy(self.reconstruct(images, noise)["losses"])

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        weights = y_pred["mask"]
        if sample_weight is not None:
            weights = weights * ops.reshape(ops.cast(sample_weight, "float32"), (-1, 1))
        loss = self._objective(self.targets(x), ops.cast(y_pred["predictions"], "float32"), sample_weight=weights)
        return self.with_regularisers(loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return self.get_metrics_result()

    def get_config(self):
        # The options flat beside the encoder's spec, as files written before MAESpec have them.
        return self.config_with(**self.mae_spec.to_config(), seed=self.seed)
