"""The Vision Transformer as a functional Keras model (plain and hybrid ResNet+ViT)."""

import dataclasses

import keras
from keras.dtype_policies import DTypePolicyMap

from keras_vit.labels import label_set_name, resolve_class_names
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.heads import TokenPooling
from keras_vit.layers.inline import own_policy
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.resnet import ResNetBackbone
from keras_vit.layers.tokens import ClassToken, PatchTokens, PositionEmbedding
from keras_vit.models.inputs import check_data, check_images, input_shape
from keras_vit.models.spec import ViTSpec


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """ViT (Dosovitskiy et al., ICLR 2021) as a functional ``keras.Model``, built from a spec.

    The model is built from a ``ViTSpec`` as a functional graph, so ``summary()``,
    ``get_layer``, feature extraction and export work as for any functional model, and
    ``get_config`` returns the spec so ``.keras`` files reload on any backend. Most users
    call ``keras_vit.create_model(name, ...)`` instead.

    Args:
        spec: a ``ViTSpec`` (default: ``ViTSpec()``, a ViT-B/16 at 224).
        dtype: the Keras dtype policy of every layer (e.g. ``"mixed_bfloat16"``; default:
            the global one). Under a mixed policy the classifier head computes in float32,
            for a stable loss.
        preprocessing: the ``keras_vit.layers.ImagePreprocessing`` that turns raw images
            into this model's input (or its config), kept as ``model.preprocessing`` and
            saved with the model; the exports and ``classify`` apply it. Its image size
            must be the model's.
        class_names: one name per class, or a label set's name (``"imagenet1k"``), kept
            as ``model.class_names`` and saved with the model (``keras_vit.decode_predictions``).
        **options: fields of ``ViTSpec`` applied over ``spec`` (``hidden_size=...``;
            ``resnet_<field>`` for the hybrid's stem), and Keras' ``name`` / ``trainable``.

    Example:
    >>> import numpy as np
    >>> model = VisionTransformer(image_size=32, patch_size=8, hidden_size=32, depth=2,
    ...                           num_heads=2, mlp_dim=64, num_classes=10)
    >>> tuple(model(np.zeros((1, 32, 32, 3), "float32")).shape)
    (1, 10)
    >>> model.spec.grid_size
    (4, 4)
    """

    def __init__(self, spec=None, dtype=None, preprocessing=None, class_names=None, **options):
        keras_options = {k: options.pop(k) for k in ("name", "trainable") if k in options}
        spec = (spec if isinstance(spec, ViTSpec) else ViTSpec.from_config(spec or {})).replace(**options)
        policy, dtype_for = _layer_dtypes(dtype)
        layers = _make_layers(spec, dtype_for)
        inputs = keras.Input(shape=input_shape(spec), name="images")
        outputs = _forward(layers, inputs, spec.norm_after_pool)
        super().__init__(inputs=inputs, outputs=outputs, **keras_options)
        self.dtype_policy = policy  # functional models drop a dtype argument; get_config saves it
        self._vit_layers = layers
        self.spec = spec
        # Kept out of Keras' layer tracking: the graph does not call it, and it has no weights.
        object.__setattr__(self, "_preprocessing", _checked_preprocessing(preprocessing, spec.image_size))
        object.__setattr__(self, "_class_names", class_names)
        _ = self.class_names  # checked now: one name per class

    def call(self, inputs, training=None, mask=None):
        check_images(self.spec, tuple(inputs.shape))
        return super().call(inputs, training=training, mask=mask)

    # Checked before Keras builds its step function: on JAX, an error raised inside it leaves
    # the model's variables purged, and every later call fails ("'NoneType' object is not
    # callable"; Keras 3.15's trainer, for any model).
    def predict(self, x, *args, **kwargs):
        check_data(self.spec, x)
        return super().predict(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        check_data(self.spec, x)
        return super().evaluate(x, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        check_data(self.spec, x)
        return super().fit(x, *args, **kwargs)

    @property
    def preprocessing(self):
        """The layer that turns raw 0..255 images into this model's input, or None."""
        return self._preprocessing

    @property
    def class_names(self):
        """One name per classifier output, or None."""
        return resolve_class_names(self._class_names, self.spec.num_classes if self.spec.include_top else None)

    def classify(self, images, batch_size=32):
        """Class probabilities of raw images, pre-processed by ``model.preprocessing``.

        Args:
            images: 0..255 pixels (uint8 or float): one ``(height, width, channels)``
                image, a batch, or a list of images of different sizes.
            batch_size: images per forward pass.

        Returns:
            A numpy ``(batch, num_classes)`` array of probabilities; decode it with
            ``keras_vit.decode_predictions(probabilities, class_names=model)``.

        Example:
        >>> import numpy as np
        >>> from keras_vit.layers import ImagePreprocessing
        >>> model = VisionTransformer(image_size=16, patch_size=8, hidden_size=16, depth=1, num_heads=2,
        ...                           mlp_dim=32, num_classes=2, preprocessing=ImagePreprocessing(16),
        ...                           class_names=["cat", "dog"])
        >>> probabilities = model.classify(np.zeros((30, 40, 3), "uint8"))  # any size: resized, cropped
        >>> probabilities.shape, float(probabilities.sum())
        ((1, 2), 1.0)
        """
        import numpy as np

        if self.preprocessing is None:
            raise ValueError(
                f"Model {self.name!r} has no pre-processing (model.preprocessing is None): call it on images "
                "pre-processed as it was trained, or build it with preprocessing="
                "keras_vit.layers.ImagePreprocessing(...)."
            )
        if isinstance(images, (list, tuple)):
            batch = keras.ops.stack([self.preprocessing(image) for image in images])
        else:
            one = keras.ops.ndim(images) == 3
            batch = self.preprocessing(images[None] if one else images)
        scores = keras.ops.convert_to_numpy(self.predict(batch, batch_size=batch_size, verbose=0)).astype("float32")
        if self.spec.classifier_activation == "softmax":
            return scores
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return scores / scores.sum(axis=-1, keepdims=True)

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
        blocks = [_CallWith(b, return_attention_scores=True) for b in self._vit_layers["blocks"]]
        layers = dict(self._vit_layers, blocks=blocks)
        _, attention = _encode(layers, inputs, return_attention_scores=True)
        return keras.Model(inputs, attention, name=f"{self.name}_attention")

    def intermediate_model(self, blocks=None, output_format="NHWC", norm=False, include_prefix=False, stem=False):
        """A model sharing these weights that outputs chosen blocks' tokens: a backbone.

        As timm's ``forward_intermediates``: for dense heads (segmentation, detection) and
        feature pyramids. The result is a functional model, usable as a layer inside a
        larger model and trained with it by ``fit``.

        Args:
            blocks: which blocks' outputs: None for all, an int ``n`` for the last ``n``,
                or a list of indices (negative ones count from the end, as in timm).
            output_format: ``"NHWC"``: ``(batch, grid_h, grid_w, width)`` feature maps of
                the patch tokens; ``"tokens"``: ``(batch, tokens, width)`` sequences.
            norm: apply the final LayerNorm to each output (timm's ``norm=True``).
            include_prefix: keep the class token in ``"tokens"`` outputs.
            stem: for a hybrid, also the ResNet stages' feature maps.

        Returns:
            A ``keras.Model``: images -> a dict ``{"block_<i>": ..., "stem_stage_<j>": ...}``.

        Example:
        >>> import numpy as np
        >>> model = VisionTransformer(image_size=(16, 32), patch_size=8, hidden_size=16, depth=3,
        ...                           num_heads=2, mlp_dim=32, num_classes=3)
        >>> features = model.intermediate_model(blocks=[0, -1])(np.zeros((1, 16, 32, 3), "float32"))
        >>> {name: tuple(value.shape) for name, value in features.items()}
        {'block_0': (1, 2, 4, 16), 'block_2': (1, 2, 4, 16)}
        """
        spec, layers = self.spec, self._vit_layers
        indices = _block_indices(blocks, spec.depth)
        if output_format not in ("NHWC", "tokens"):
            raise ValueError(f"output_format must be 'NHWC' or 'tokens'; got {output_format!r}.")
        if include_prefix and output_format != "tokens":
            raise ValueError("include_prefix=True needs output_format='tokens': a feature map has no class token.")
        if norm and spec.norm_after_pool:
            raise ValueError(
                "norm=True: this model's final LayerNorm follows the pooling (norm_after_pool, timm's fc_norm), "
                "so its tokens have none; leave norm=False."
            )
        if stem and layers["stem"] is None:
            raise ValueError("stem=True needs a hybrid (a ResNet stem); this model has none.")
        nhwc = output_format == "NHWC"
        keep_prefix = include_prefix and not nhwc
        patch_tokens = PatchTokens(
            0 if keep_prefix else spec.num_prefix_tokens, spec.grid_size if nhwc else None, name="patch_tokens"
        )
        inputs = keras.Input(shape=self.input_shape[1:], name="images")
        outputs = {}
        x = inputs
        if stem:
            x, stages = _CallWith(layers["stem"], return_stages=True)(x)
            outputs.update({f"stem_stage_{j}": stage for j, stage in enumerate(stages)})
        elif layers["stem"] is not None:
            x = layers["stem"](x)
        x, patch_map = _embed(layers, x)

        def to_output(tokens):  # a dynamic model's grid is its patch map's
            return patch_tokens(tokens, patch_map) if nhwc and patch_map is not None else patch_tokens(tokens)

        for i, block in enumerate(layers["blocks"][: max(indices) + 1]):  # later blocks are not needed
            x = block(x)
            if i in indices:
                outputs[f"block_{i}"] = to_output(layers["encoder_norm"](x) if norm else x)
        return keras.Model(inputs, outputs, name=f"{self.name}_intermediates")

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
        last = "encoder_norm" if self.spec.norm_after_pool else "pooling"
        return keras.Model(self.input, self.get_layer(last).output, name=f"{self.name}_features")

    def get_config(self):
        config = {**super().get_config(), **self.spec.to_config()}
        if self.preprocessing is not None:
            config["preprocessing"] = keras.saving.serialize_keras_object(self.preprocessing)
        if self.class_names is not None:  # a label set's name stays a name: files stay small
            names = label_set_name(self.class_names)
            config["class_names"] = names if isinstance(names, str) else list(names)
        # Layers whose policy is not the model's (quantized ones, the float32 head under
        # mixed precision) are recorded at their paths, so that a reloaded model gives
        # each its own policy again: a quantized model's file reloads quantized.
        own = {layer.path: own_policy(layer) for layer in self._flatten_layers(include_self=False) if layer.path}
        differ = {path: p for path, p in own.items() if p.name != self.dtype_policy.name}
        if differ:
            policy_map = DTypePolicyMap(default_policy=self.dtype_policy, policy_map=differ)
            config["dtype"] = keras.dtype_policies.serialize(policy_map)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _CallWith(keras.layers.Layer):
    """Calls a layer with extra call arguments (``return_attention_scores=True``, ...).

    Keras' functional graph requires a layer to return the same number of outputs at
    every call, so a second, multi-output call of a layer goes through this wrapper,
    which shares the layer's weights.
    """

    def __init__(self, layer, **call_kwargs):
        super().__init__(name=f"{layer.name}_with_{'_'.join(call_kwargs)}", dtype=layer.dtype_policy)
        self.layer = layer
        self.call_kwargs = call_kwargs

    def call(self, x, **kwargs):
        return self.layer(x, **self.call_kwargs, **{k: v for k, v in kwargs.items() if k not in self.call_kwargs})


def resized_preprocessing(preprocessing, image_size):
    """The same pre-processing for another model image size (None stays None)."""
    if preprocessing is None or tuple(preprocessing.image_size) == tuple(image_size):
        return preprocessing
    return type(preprocessing).from_config({**preprocessing.get_config(), "image_size": image_size})


def _checked_preprocessing(preprocessing, image_size):
    if isinstance(preprocessing, dict):
        preprocessing = keras.saving.deserialize_keras_object(preprocessing)
    if preprocessing is not None and tuple(preprocessing.image_size) != tuple(image_size):
        raise ValueError(
            f"The pre-processing outputs {tuple(preprocessing.image_size)} images but the model takes "
            f"{tuple(image_size)}: give it the model's image size."
        )
    return preprocessing


def _layer_dtypes(dtype):
    """The model's policy, and a function giving each top-level layer its dtype.

    ``dtype`` is a policy, or (a reloaded quantized model) a ``DTypePolicyMap`` of the
    layers whose policy differs from the model's, by path. The package's composite layers
    take the map itself and look their parts up in it; other layers take their entry.
    Under a mixed policy the head computes in float32, for a stable loss.
    """
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    saved = policy if isinstance(policy, DTypePolicyMap) else None
    base = saved.default_policy if saved is not None else policy
    mixed = base.compute_dtype != base.variable_dtype

    def dtype_for(name, composite=False):
        if saved is not None and (composite or name in saved):
            return saved if composite else saved[name]
        return keras.dtype_policies.get("float32") if name == "head" and mixed else base

    return base, dtype_for


def _make_layers(spec, dtype_for):
    """The model's layers by role (None where the spec has none), each named for its role."""

    def make(name, layer_class, *args, composite=False, **kwargs):
        return layer_class(*args, name=name, dtype=dtype_for(name, composite), **kwargs)

    def block(i):
        return make(
            f"block_{i}", EncoderBlock, spec.num_heads, spec.mlp_dim, composite=True,
            dropout_rate=spec.dropout_rate, attention_dropout_rate=spec.attention_dropout_rate,
            drop_path_rate=spec.drop_path_rate * i / max(spec.depth - 1, 1),  # rising linearly
            layer_norm_epsilon=spec.layer_norm_epsilon, gelu_approximate=spec.gelu_approximate,
            qkv_bias=spec.qkv_bias,
        )  # fmt: skip

    initializer = "zeros" if spec.head_zero_init else "glorot_uniform"
    return dict(
        stem=make("resnet", ResNetBackbone, **dataclasses.asdict(spec.resnet)) if spec.resnet else None,
        patch_embedding=make(
            "patch_embedding",
            PatchEmbedding,
            spec.hidden_size,
            spec.patch_size,
            spec.embedding_channels,
            flatten=not spec.dynamic_image_size,  # a dynamic model reads the grid from the map
        ),
        patch_flatten=(
            make("patch_flatten", keras.layers.Reshape, (-1, spec.hidden_size)) if spec.dynamic_image_size else None
        ),
        class_token=make("class_token", ClassToken) if spec.has_class_token else None,
        position_embedding=make(
            "position_embedding", PositionEmbedding, spec.grid_size, spec.num_prefix_tokens, spec.position_embedding
        ),
        embedding_dropout=make("embedding_dropout", keras.layers.Dropout, spec.dropout_rate),
        blocks=[block(i) for i in range(spec.depth)],
        encoder_norm=make("encoder_norm", LayerNorm, epsilon=spec.layer_norm_epsilon),
        pooling=make("pooling", TokenPooling, spec.pooling, spec.num_prefix_tokens) if spec.pooling else None,
        pre_logits=(
            make("pre_logits", keras.layers.Dense, spec.representation_size, activation="tanh")
            if spec.representation_size
            else None
        ),
        head=(
            make(
                "head", keras.layers.Dense, spec.num_classes, spec.classifier_activation, kernel_initializer=initializer
            )
            if spec.include_top
            else None
        ),
    )


def _block_indices(blocks, depth):
    """Sorted block indices from None (all), a count of last blocks, or indices (negative from the end)."""
    if blocks is None:
        return list(range(depth))
    if isinstance(blocks, int) and not isinstance(blocks, bool):
        if not 1 <= blocks <= depth:
            raise ValueError(f"blocks={blocks}: expected a count of last blocks in 1..{depth} (the model's depth).")
        return list(range(depth - blocks, depth))
    indices = list(blocks)
    bad = [i for i in indices if not isinstance(i, int) or not -depth <= i < depth]
    if not indices or bad:
        raise ValueError(
            f"blocks={blocks!r}: expected block indices in {-depth}..{depth - 1} (the model has {depth} blocks)."
        )
    return sorted({i % depth for i in indices})


def _embed(layers, x):
    """Stem output (or images) -> (the token sequence that enters the first block, the
    ``(batch, rows, cols, width)`` patch map of a dynamic-size model, else None)."""
    patch_map = None
    x = layers["patch_embedding"](x)
    if layers["patch_flatten"] is not None:
        patch_map, x = x, layers["patch_flatten"](x)
    if layers["class_token"] is not None:
        x = layers["class_token"](x)
    if patch_map is None:
        x = layers["position_embedding"](x)
    else:
        x = layers["position_embedding"](x, patch_map)
    return layers["embedding_dropout"](x), patch_map


def _encode(layers, images, return_attention_scores=False):
    """Images -> final tokens before the encoder norm (and the attention weights)."""
    x = images if layers["stem"] is None else layers["stem"](images)
    x, _ = _embed(layers, x)
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
