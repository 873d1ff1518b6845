"""The Vision Transformer as a functional Keras model (plain and hybrid ResNet+ViT)."""

import keras

from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.heads import POOLINGS, TokenPooling
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.tokens import ClassToken, PositionEmbedding


def _pair(size):
    return (int(size), int(size)) if isinstance(size, int) else tuple(int(s) for s in size)


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """ViT (Dosovitskiy et al., ICLR 2021) as a functional ``keras.Model``.

    The model is built from its arguments as a functional graph, so ``summary()``,
    ``get_layer``, feature extraction and export work as for any functional model, and
    ``get_config`` returns exactly these arguments so ``.keras`` files reload anywhere.
    Most users call ``keras_vit.create_model(name, ...)`` instead.

    Args:
        image_size: input side (int) or ``(height, width)``; divisible by the total stride
            (the patch size, times the ResNet stride for hybrids).
        patch_size: patch side in pixels (in feature-map cells for hybrids, usually 1).
        hidden_size, depth, num_heads, mlp_dim: the Transformer's width, number of blocks,
            heads and MLP width (see ``keras_vit.models.configs.SIZES``).
        num_channels: input channels.
        num_classes: classifier outputs (ignored when ``include_top=False``).
        include_top: add the classifier head; if False the model outputs the pooled
            features (or the normalised tokens when ``pooling=None``).
        pooling: ``"token"`` (class token, the paper's default), ``"gap"`` (mean of the
            patch tokens) or ``None`` (no pooling, only with ``include_top=False``).
        class_token: prepend a class token; defaults to ``pooling != "gap"`` as in the
            original code (its "gap" models have none; timm's usually keep one).
        position_embedding: ``"learned"`` (the paper's) or ``"sincos2d"`` (fixed).
        representation_size: width of the pre-logits layer (Dense + tanh) used in the
            paper's pre-training; None (default) for none, as in fine-tuning.
        dropout_rate: dropout after the embeddings, the attention and in the MLPs.
        attention_dropout_rate: dropout on attention weights.
        drop_path_rate: stochastic depth, rising linearly from 0 to this at the last block.
        layer_norm_epsilon: 1e-6 (original code, timm); HF transformers uses 1e-12.
        gelu_approximate: True for the tanh GELU of the original JAX code; False for the
            exact erf GELU of timm and HF.
        norm_after_pool: apply the final LayerNorm to the pooled vector instead of every
            token (timm's ``fc_norm``, its default for average pooling).
        head_zero_init: zero-initialise the classifier (the original code always does;
            fine-tuning needs it so the new head starts at zero).
        classifier_activation: activation of the head (None: logits).
        resnet_block_units: units per stage of a BiT ResNet stem for hybrids, e.g.
            ``(3, 4, 9)`` for R50; None for a plain ViT.
        resnet_width: base width of that ResNet.

    Example:
    >>> import numpy as np
    >>> model = VisionTransformer(image_size=32, patch_size=8, hidden_size=32, depth=2,
    ...                           num_heads=2, mlp_dim=64, num_classes=10)
    >>> tuple(model(np.zeros((1, 32, 32, 3), "float32")).shape)
    (1, 10)
    """

    def __init__(
        self,
        image_size=224,
        patch_size=16,
        hidden_size=768,
        depth=12,
        num_heads=12,
        mlp_dim=3072,
        num_channels=3,
        num_classes=1000,
        include_top=True,
        pooling="token",
        class_token=None,
        position_embedding="learned",
        representation_size=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        layer_norm_epsilon=1e-6,
        gelu_approximate=True,
        norm_after_pool=False,
        head_zero_init=True,
        classifier_activation=None,
        resnet_block_units=None,
        resnet_width=64,
        **kwargs,
    ):
        image_size = _pair(image_size)
        if pooling is None and include_top:
            raise ValueError("pooling=None is only possible with include_top=False.")
        if pooling is not None and pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS} or None, got {pooling!r}.")
        if class_token is None:
            class_token = pooling != "gap"
        if pooling == "token" and not class_token:
            raise ValueError("pooling='token' needs class_token=True.")
        stem, grid_size = _make_stem(image_size, patch_size, num_channels, resnet_block_units, resnet_width)
        num_prefix = int(class_token)
        layers = dict(
            stem=stem,
            patch_embedding=PatchEmbedding(
                hidden_size, patch_size, _stem_channels(num_channels, stem), name="patch_embedding"
            ),
            class_token=ClassToken(name="class_token") if class_token else None,
            position_embedding=PositionEmbedding(grid_size, num_prefix, position_embedding, name="position_embedding"),
            embedding_dropout=keras.layers.Dropout(dropout_rate, name="embedding_dropout"),
            blocks=[
                EncoderBlock(
                    num_heads,
                    mlp_dim,
                    dropout_rate=dropout_rate,
                    attention_dropout_rate=attention_dropout_rate,
                    drop_path_rate=drop_path_rate * i / max(depth - 1, 1),
                    layer_norm_epsilon=layer_norm_epsilon,
                    gelu_approximate=gelu_approximate,
                    name=f"block_{i}",
                )
                for i in range(depth)
            ],
            encoder_norm=keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm"),
            pooling=TokenPooling(pooling, num_prefix, name="pooling") if pooling else None,
            pre_logits=(
                keras.layers.Dense(representation_size, activation="tanh", name="pre_logits")
                if representation_size
                else None
            ),
            head=(
                keras.layers.Dense(
                    num_classes,
                    activation=classifier_activation,
                    kernel_initializer="zeros" if head_zero_init else "glorot_uniform",
                    # Logits in float32 even under mixed precision, for a stable loss.
                    dtype="float32" if _is_mixed_precision() else None,
                    name="head",
                )
                if include_top
                else None
            ),
        )
        inputs = keras.Input(shape=image_size + (num_channels,), name="images")
        outputs = _forward(layers, inputs, norm_after_pool)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self._vit_layers = layers
        self.grid_size = grid_size
        self.num_prefix_tokens = num_prefix
        self.norm_after_pool = norm_after_pool
        self._config = dict(
            image_size=image_size,
            patch_size=patch_size,
            hidden_size=hidden_size,
            depth=depth,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            num_channels=num_channels,
            num_classes=num_classes,
            include_top=include_top,
            pooling=pooling,
            class_token=class_token,
            position_embedding=position_embedding,
            representation_size=representation_size,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=drop_path_rate,
            layer_norm_epsilon=layer_norm_epsilon,
            gelu_approximate=gelu_approximate,
            norm_after_pool=norm_after_pool,
            head_zero_init=head_zero_init,
            classifier_activation=classifier_activation,
            resnet_block_units=tuple(resnet_block_units) if resnet_block_units else None,
            resnet_width=resnet_width,
        )

    @property
    def vit_config(self):
        """The architecture arguments this model was built with (a copy)."""
        return dict(self._config)

    def attention_model(self):
        """A model sharing these weights that outputs every block's attention weights.

        Returns a functional model mapping images to a list with one
        ``(batch, heads, tokens, tokens)`` array per block (softmax weights, rows sum to 1).
        Built on demand, so the main model keeps the fused, faster attention.

        >>> import numpy as np
        >>> model = VisionTransformer(image_size=16, patch_size=8, hidden_size=16, depth=2,
        ...                           num_heads=2, mlp_dim=32, num_classes=3)
        >>> maps = model.attention_model()(np.zeros((1, 16, 16, 3), "float32"))
        >>> len(maps), tuple(maps[0].shape)
        (2, (1, 2, 5, 5))
        """
        inputs = keras.Input(shape=self.input_shape[1:], name="images")
        layers = dict(self._vit_layers, blocks=[_WithAttention(b) for b in self._vit_layers["blocks"]])
        _, attention = _encode(layers, inputs, return_attention_scores=True)
        return keras.Model(inputs, attention, name=f"{self.name}_attention")

    def feature_model(self):
        """A model sharing these weights: images -> the pooled, normalised image vector.

        That is what feeds the pre-logits layer and the classifier head (and what
        fine-tuning starts from).

        >>> model = VisionTransformer(image_size=16, patch_size=8, hidden_size=16, depth=1,
        ...                           num_heads=2, mlp_dim=32, num_classes=3)
        >>> model.feature_model().output_shape
        (None, 16)
        """
        if self._vit_layers["pooling"] is None:
            raise ValueError("This model has no pooling (pooling=None): its output is the tokens.")
        last = "encoder_norm" if self.norm_after_pool else "pooling"
        return keras.Model(self.input, self.get_layer(last).output, name=f"{self.name}_features")

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, **self._config}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _WithAttention(keras.layers.Layer):
    """Calls a block for its attention weights too.

    Keras' functional graph requires a layer to return the same number of outputs at
    every call, so the second, two-output call of a block goes through this wrapper,
    which shares the block's weights.
    """

    def __init__(self, block):
        super().__init__(name=f"{block.name}_with_attention", dtype=block.dtype_policy)
        self.block = block

    def call(self, x, return_attention_scores=True):
        return self.block(x, return_attention_scores=True)


def _is_mixed_precision():
    policy = keras.config.dtype_policy()
    return policy.compute_dtype != policy.variable_dtype


def _make_stem(image_size, patch_size, num_channels, resnet_block_units, resnet_width):
    """The layer in front of the patch embedding (a ResNet for hybrids) and the token grid."""
    stride = patch_size
    stem = None
    if resnet_block_units is not None:  # () must fail loudly, not build a plain ViT
        from keras_vit.layers.resnet import ResNetBackbone, resnet_feature_stride

        stem = ResNetBackbone(resnet_block_units, width=resnet_width, name="resnet")
        stride = patch_size * resnet_feature_stride(resnet_block_units)
    for side in image_size:
        if side % stride:
            what = f"the patch size {patch_size}" if stem is None else (
                f"the ResNet stride x patch size = {stride}"
            )
            raise ValueError(f"image size {image_size} is not divisible by {what}.")
    return stem, (image_size[0] // stride, image_size[1] // stride)


def _stem_channels(num_channels, stem):
    if stem is None:
        return num_channels
    from keras_vit.layers.resnet import resnet_out_channels

    return resnet_out_channels(stem.block_units, stem.width)


def _encode(layers, images, return_attention_scores=False):
    """Images -> final tokens before the encoder norm (and the attention weights)."""
    x = images if layers["stem"] is None else layers["stem"](images)
    x = layers["patch_embedding"](x)
    if layers["class_token"] is not None:
        x = layers["class_token"](x)
    x = layers["position_embedding"](x)
    x = layers["embedding_dropout"](x)
    attention = []
    for block in layers["blocks"]:
        if return_attention_scores:
            x, weights = block(x, return_attention_scores=True)
            attention.append(weights)
        else:
            x = block(x)
    return x, attention


def _forward(layers, images, norm_after_pool):
    x, _ = _encode(layers, images)
    if layers["pooling"] is None:
        return layers["encoder_norm"](x)
    if not norm_after_pool:
        x = layers["encoder_norm"](x)
    x = layers["pooling"](x)
    if norm_after_pool:
        x = layers["encoder_norm"](x)
    if layers["pre_logits"] is not None:
        x = layers["pre_logits"](x)
    if layers["head"] is not None:
        x = layers["head"](x)
    return x
