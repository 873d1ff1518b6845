"""The Vision Transformer as a functional Keras model (plain and hybrid ResNet+ViT)."""

import contextlib
import gc
import types
import warnings

import keras
from keras.dtype_policies import DTypePolicyMap

from keras_vit.images import as_pixels
from keras_vit.internals import set_untracked, sublayers
from keras_vit.labels import label_set_name, resolve_class_names
from keras_vit.layers.inline import own_policy
from keras_vit.layers.tokens import PatchTokens
from keras_vit.models.graph import (
    block_indices,
    call_block,
    embed,
    encode,
    final_norm,
    forward,
    layer_dtypes,
    make_layers,
    rotary_table,
)
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

    Examples:
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
        policy, dtype_for = layer_dtypes(dtype)
        layers = make_layers(spec, dtype_for)
        inputs = keras.Input(shape=input_shape(spec), name="images")
        outputs = forward(layers, inputs, spec.norm_after_pool)
        super().__init__(inputs=inputs, outputs=outputs, **keras_options)
        self.dtype_policy = policy  # functional models drop a dtype argument; get_config saves it
        self._vit_layers = layers
        self.spec = spec
        # Kept out of Keras' layer tracking: the graph does not call it, and it has no weights.
        set_untracked(self, "_preprocessing", _checked_preprocessing(preprocessing, spec.image_size))
        set_untracked(self, "_class_names", class_names)
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
    def layers_by_role(self):
        """The model's layers by their role in the forward pass, read-only, None where the
        spec has none: ``stem`` (a hybrid's ResNet), ``patch_embedding``, ``class_token``,
        ``position_embedding``, ``rotary_embedding``, ``blocks`` (a tuple, first to last),
        ``norm``, ``pooling``, ``pre_logits``, ``head``, ... (``keys()`` lists them all).

        >>> model = VisionTransformer(image_size=16, patch_size=8, hidden_size=32, depth=2,
        ...                           num_heads=2, mlp_dim=64, num_classes=3)
        >>> [block.name for block in model.layers_by_role["blocks"]], model.layers_by_role["pre_logits"]
        (['block_0', 'block_1'], None)
        """
        return types.MappingProxyType(
            {role: tuple(layer) if isinstance(layer, list) else layer for role, layer in self._vit_layers.items()}
        )

    @property
    def preprocessing(self):
        """The layer that turns raw 0..255 images into this model's input, or None."""
        return self._preprocessing

    @property
    def class_names(self):
        """One name per classifier output, or None."""
        return resolve_class_names(self._class_names, self.spec.num_classes if self.spec.include_top else None)

    @class_names.setter
    def class_names(self, names):
        resolve_class_names(names, self.spec.num_classes if self.spec.include_top else None)  # checked first
        set_untracked(self, "_class_names", names)

    def quantize(self, mode=None, **kwargs):
        """Keras' ``Model.quantize`` (``"int8"``, ``"float8"``, ``"int4"``): the dense
        projections and the head quantized. The layers with nothing to quantize (the input,
        norms, tokens, pooling) are passed over quietly: Keras warns once for each."""
        with warnings.catch_warnings(), _one_collection():
            warnings.filterwarnings(
                "ignore", message=r"Layer \w+ does not have a `quantize` method", category=UserWarning
            )
            return super().quantize(mode, **kwargs)

    def classify(self, images, batch_size=32):
        """Class probabilities of raw images, pre-processed by ``model.preprocessing``.

        Args:
            images: 0..255 pixels (uint8 or float): one ``(height, width, channels)``
                image, a batch, or a list of images of different sizes; an image file's
                path or a PIL image stands for one image, alone or in the list.
            batch_size: images per forward pass.

        Returns:
            A numpy ``(batch, num_classes)`` array of probabilities; decode it with
            ``keras_vit.decode_predictions(probabilities, class_names=model)``.

        Examples:
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
            batch = keras.ops.stack([self.preprocessing(as_pixels(image)) for image in images])
        else:
            images = as_pixels(images)
            one = keras.ops.ndim(images) == 3
            batch = self.preprocessing(images[None] if one else images)
        scores = keras.ops.convert_to_numpy(self.predict(batch, batch_size=batch_size, verbose=0)).astype("float32")
        if self.spec.outputs_probabilities:
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
        _, attention = encode(layers, inputs, return_attention_scores=True)
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

        Examples:
            >>> import numpy as np
            >>> model = VisionTransformer(image_size=(16, 32), patch_size=8, hidden_size=16, depth=3,
            ...                           num_heads=2, mlp_dim=32, num_classes=3)
            >>> features = model.intermediate_model(blocks=[0, -1])(np.zeros((1, 16, 32, 3), "float32"))
            >>> {name: tuple(value.shape) for name, value in features.items()}
            {'block_0': (1, 2, 4, 16), 'block_2': (1, 2, 4, 16)}
        """
        spec, layers = self.spec, self._vit_layers
        indices = block_indices(blocks, spec.depth)
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
        x, patch_map = embed(layers, x)
        rope = rotary_table(layers, x, patch_map)

        def to_output(tokens):  # a dynamic model's grid is its patch map's
            return patch_tokens(tokens, patch_map) if nhwc and patch_map is not None else patch_tokens(tokens)

        for i, block in enumerate(layers["blocks"][: max(indices) + 1]):  # later blocks are not needed
            x = call_block(block, x, rope, i)
            if i in indices:
                outputs[f"block_{i}"] = to_output(final_norm(layers, x) if norm else x)
        return keras.Model(inputs, outputs, name=f"{self.name}_intermediates")

    def feature_model(self):
        """A model sharing these weights: images -> the pooled, normalised image vector.

        That is what feeds the pre-logits layer and the classifier head (and what
        fine-tuning starts from); for a DeiT distilled model, the mean of its class and
        distillation tokens, as timm's ``forward_head(pre_logits=True)``.

        >>> model = VisionTransformer(image_size=16, patch_size=8, hidden_size=16, depth=1,
        ...                           num_heads=2, mlp_dim=32, num_classes=3)
        >>> model.feature_model().output_shape
        (None, 16)
        """
        if self._vit_layers["pooling"] is None:
            raise ValueError("This model has no pooling (pooling=None): its output is the tokens.")
        if self.spec.distillation_token and self.spec.distillation_head:  # the two tokens' mean, as timm's
            tokens = [self.get_layer(name).output for name in ("pooling", "distillation_pooling")]
            features = keras.layers.Average(name="features_mean", dtype=self.dtype_policy)(tokens)
            return keras.Model(self.input, features, name=f"{self.name}_features")
        last = "encoder_norm" if self.spec.norm_after_pool and self.spec.final_norm else "pooling"
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
        own = {layer.path: own_policy(layer) for layer in sublayers(self) if layer.path}
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

    def call(self, x, rope=None, **flags):
        # rope: an encoder block's rotary table, a tensor kept apart from the Python flags.
        flags = {k: v for k, v in flags.items() if k not in self.call_kwargs}
        return self.layer(x, **self.call_kwargs, **flags, **({} if rope is None else {"rope": rope}))


@contextlib.contextmanager
def _one_collection():
    """One garbage collection at the end instead of one per dropped variable: Keras' layers
    collect each time they let go of a variable (``Layer.__delattr__``), quantizing lets go of
    every float kernel, and each collection walks every object the process holds. The
    interpreter's own collections run as ever; an explicit one elsewhere waits until the end."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        collect()


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
