"""BiT-style ResNet backbone of the hybrid ResNet+ViT models (Keras 3).

The hybrid models of "An Image is Worth 16x16 Words" (R50+ViT-B/16,
R50+ViT-L/32, R26+ViT-S/32, R26+ViT-B/32) feed the feature map of a ResNet
into the ViT patch embedding. This module reproduces that ResNet as it is
defined upstream:

* google-research/vision_transformer ``vit_jax/models_resnet.py`` and the root
  block in ``vit_jax/models_vit.py`` (the original code and checkpoints);
* timm ``_resnetv2`` in ``timm/models/vision_transformer_hybrid.py``, i.e.
  ``ResNetV2(preact=False, stem_type='same', conv_layer=StdConv2dSame(eps=1e-8))``
  (the reference the tests compare against).

Architecture (channels_last / NHWC everywhere):

* root: ``StdConv2D`` 7x7 stride 2 (TF "SAME") -> GroupNorm -> ReLU ->
  max pool 3x3 stride 2 (TF "SAME", padded with 0, exact after its ReLU);
* stage ``i`` (0-based) has ``block_units[i]`` NON-pre-activation bottleneck
  units with ``width * 2**i`` middle channels and ``4 * width * 2**i`` output
  channels. Stage 0 has stride 1, every later stage stride 2, applied by the
  first unit in its 3x3 ``conv2`` and its 1x1 ``conv_proj``;
* unit: conv1 1x1 -> GN -> ReLU -> conv2 3x3 (stride) -> GN -> ReLU ->
  conv3 1x1 -> GN, plus the shortcut (``conv_proj`` 1x1 (stride) -> ``gn_proj``
  when the shape changes), then ReLU after the add.

So the total stride is ``4 * 2**(len(block_units) - 1)``: 16 for the 3-stage
R50 of R50+ViT-B/16 ``(3, 4, 9)``, 32 for the 4-stage ``(2, 2, 2, 2)`` (R26)
and ``(3, 4, 6, 3)`` (R50 of R50+ViT-L/32).

Variable paths
--------------
Sublayers are named after the original ``.npz`` checkpoint layout. With the
default backbone name ``"resnet"`` the Keras variable paths are::

    resnet/conv_root/kernel                      npz: conv_root/kernel
    resnet/gn_root/gamma                         npz: gn_root/scale
    resnet/gn_root/beta                          npz: gn_root/bias
    resnet/block{i}/unit{j}/conv{k}/kernel       npz: block{i}/unit{j}/conv{k}/kernel
    resnet/block{i}/unit{j}/gn{k}/gamma          npz: block{i}/unit{j}/gn{k}/scale
    resnet/block{i}/unit{j}/gn{k}/beta           npz: block{i}/unit{j}/gn{k}/bias
    resnet/block{i}/unit1/conv_proj/kernel       npz: block{i}/unit1/conv_proj/kernel
    resnet/block{i}/unit1/gn_proj/gamma          npz: block{i}/unit1/gn_proj/scale
    resnet/block{i}/unit1/gn_proj/beta           npz: block{i}/unit1/gn_proj/bias

with ``i`` = 1..len(block_units), ``j`` = 1..block_units[i-1], ``k`` = 1..3
(all 1-based, as in the checkpoints; ``conv_proj``/``gn_proj`` only exist in
``unit1`` of each block). Conv kernels are HWIO ``(kh, kw, in, out)`` exactly
as stored in the ``.npz`` files (timm's torch weights are OIHW: transpose
``(2, 3, 1, 0)``). The only renaming is GroupNorm ``scale -> gamma`` and
``bias -> beta`` (Keras ``GroupNormalization`` names). In timm the same
weights live at ``stem.conv``, ``stem.norm``, ``stages.{i-1}.blocks.{j-1}.
{conv,norm}{k}`` and ``...blocks.0.downsample.{conv,norm}``.
"""

import math

import keras
from keras import ops

from keras_vit.layers.inline import call_inline

# timm's `_resnetv2` builds the hybrid backbone with
# `partial(StdConv2dSame, eps=1e-8)`, and standardises as
# (w - mean) / sqrt(var + eps). The original google-research code
# (vit_jax/models_resnet.py) instead uses (w - mean) / (std + 1e-5). The two
# agree to ~1e-5 relative for ordinary kernels; we default to timm's value
# because the tests compare against timm.
DEFAULT_STD_CONV_EPSILON = 1e-8
# timm's GroupNormAct default (torch GroupNorm). The original flax
# `nn.GroupNorm` uses epsilon=1e-6; pass that to match the JAX code exactly.
DEFAULT_GROUP_NORM_EPSILON = 1e-5

# timm's ResNetV2 has channel widths for at most four stages (it silently
# drops extra entries of `layers`); the paper's hybrids use three or four.
_MAX_STAGES = 4


def _validate_block_units(block_units):
    """Returns `block_units` as a tuple of ints or raises a ValueError."""
    if isinstance(block_units, (str, bytes)) or not hasattr(
        block_units, "__iter__"
    ):
        raise ValueError(
            "`block_units` must be a sequence of positive ints, one per "
            f"stage, e.g. (3, 4, 9). Received: block_units={block_units!r}"
        )
    units = tuple(block_units)
    if not units:
        raise ValueError(
            "`block_units` must name at least one stage, e.g. (3, 4, 9) for "
            "R50+ViT-B/16 or (2, 2, 2, 2) for R26. Received an empty sequence."
        )
    if len(units) > _MAX_STAGES:
        raise ValueError(
            f"`block_units` may have at most {_MAX_STAGES} stages (the BiT "
            f"ResNet has four). Received {len(units)} stages: {units}"
        )
    for u in units:
        # bool is an int subclass but never a meaningful unit count.
        if isinstance(u, bool) or not isinstance(u, int) or u < 1:
            raise ValueError(
                "Every entry of `block_units` must be an int >= 1. "
                f"Received: block_units={units!r}"
            )
    return units


def resnet_feature_stride(block_units):
    """Total stride of the backbone: 4 (root) * 2 per stage after the first.

    >>> resnet_feature_stride((3, 4, 9))
    16
    >>> resnet_feature_stride((2, 2, 2, 2))
    32
    """
    units = _validate_block_units(block_units)
    return 4 * 2 ** (len(units) - 1)


def resnet_out_channels(block_units, width=64):
    """Channels of the backbone output: 4 (expansion) * width * 2**(stages-1).

    >>> resnet_out_channels((3, 4, 9), 64)
    1024
    >>> resnet_out_channels((3, 4, 6, 3), 64)
    2048
    """
    units = _validate_block_units(block_units)
    return 4 * int(width) * 2 ** (len(units) - 1)


def _same_padding(size, kernel_size, stride, dilation=1):
    """TF "SAME" padding (before, after), as timm's `get_same_padding`.

    The odd pixel goes after (bottom/right), so the padding is asymmetric for
    e.g. a stride-2 7x7 conv on an even input.
    """
    total = max(
        (math.ceil(size / stride) - 1) * stride
        + (kernel_size - 1) * dilation
        + 1
        - size,
        0,
    )
    return total // 2, total - total // 2


def _conv_output_size(size, kernel_size, stride, padding):
    if size is None:
        return None
    if padding == "same":
        return math.ceil(size / stride)
    return (size - kernel_size) // stride + 1


def _check_positive_spatial(shape, what, layer_name):
    for axis, dim in zip(("height", "width"), shape[1:3]):
        if dim is not None and dim < 1:
            raise ValueError(
                f"{layer_name}: {what} has an empty {axis} ({dim}); input "
                f"shape {tuple(shape)} is too small for this layer."
            )


def _check_nhwc(input_shape, layer_name):
    if len(input_shape) != 4:
        raise ValueError(
            f"{layer_name} expects a rank-4 NHWC input (batch, height, width, "
            f"channels). Received shape: {tuple(input_shape)}"
        )
    if input_shape[-1] is None:
        raise ValueError(
            f"{layer_name} needs a known channel dimension. Received shape: "
            f"{tuple(input_shape)}"
        )
    _check_positive_spatial(input_shape, "the input", layer_name)


def _max_pool_same(x, pool_size=3, strides=2, pad_value=float("-inf")):
    """Max pool with TF "SAME" padding, as timm's `MaxPool2dSame`.

    ``pad_value=-inf`` never lets a padded position win, for any input. After
    a ReLU (x >= 0) padding with 0 gives the same result exactly, and only a
    finite pad survives full-integer quantisation (LiteRT aborts on -inf).
    """
    height, width = x.shape[1], x.shape[2]
    if height is None or width is None:
        # Only reached when tracing a TF graph with unknown spatial dims; TF's
        # own "SAME" pooling is the definition timm reproduces.
        return ops.max_pool(x, pool_size, strides, padding="same")
    pad_h = _same_padding(height, pool_size, strides)
    pad_w = _same_padding(width, pool_size, strides)
    if any(pad_h + pad_w):
        x = ops.pad(x, ((0, 0), pad_h, pad_w, (0, 0)), constant_values=pad_value)
    return ops.max_pool(x, pool_size, strides, padding="valid")


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Layer):
    """2D convolution with weight standardisation (BiT / ViT-hybrid).

    Before every convolution the kernel is standardised per output channel
    over ``(kh, kw, in)``: ``(w - mean) / sqrt(var + epsilon)`` (biased
    variance), as timm's ``StdConv2dSame``. ``padding="same"`` is TensorFlow
    "SAME" padding (asymmetric when needed, extra pixel at bottom/right),
    computed from the input size like timm's ``pad_same``; ``"valid"`` means
    no padding.

    Args:
        filters: number of output channels.
        kernel_size: int or (kh, kw).
        strides: int or (sh, sw).
        padding: ``"same"`` (TF style) or ``"valid"``.
        epsilon: standardisation epsilon. Default 1e-8 (timm's hybrid value;
            the original JAX code uses ``/ (std + 1e-5)`` instead).
        use_bias: add a bias (the BiT/hybrid convs have none).
        kernel_initializer: initializer of the HWIO kernel.
        bias_initializer: initializer of the bias.

    Example:

    >>> import numpy as np
    >>> conv = StdConv2D(8, 7, strides=2, name="conv_root")
    >>> tuple(conv(np.zeros((1, 50, 50, 3), "float32")).shape)
    (1, 25, 25, 8)
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="same",
        epsilon=DEFAULT_STD_CONV_EPSILON,
        use_bias=False,
        kernel_initializer="he_normal",
        bias_initializer="zeros",
        **kwargs,
    ):
        # The kernel is standardised in its own (float32) dtype and cast
        # afterwards, so skip Keras' automatic autocasting (the variables opt out
        # too, so an owner's autocast scope cannot cast them either).
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = self._pair(kernel_size, "kernel_size")
        self.strides = self._pair(strides, "strides")
        padding = str(padding).lower()
        if padding not in ("same", "valid"):
            raise ValueError(
                "`padding` must be 'same' (TF style) or 'valid'. "
                f"Received: padding={padding!r}"
            )
        self.padding = padding
        self.epsilon = float(epsilon)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        if self.filters < 1:
            raise ValueError(f"`filters` must be >= 1. Received: {filters}")

    @staticmethod
    def _pair(value, name):
        if isinstance(value, int):
            value = (value, value)
        value = tuple(int(v) for v in value)
        if len(value) != 2 or min(value) < 1:
            raise ValueError(
                f"`{name}` must be a positive int or a pair of them. "
                f"Received: {value}"
            )
        return value

    def build(self, input_shape):
        _check_nhwc(input_shape, f"StdConv2D '{self.name}'")
        self._check_output_not_empty(input_shape)
        in_channels = input_shape[-1]
        self.kernel = self.add_weight(
            name="kernel",
            shape=self.kernel_size + (in_channels, self.filters),
            initializer=self.kernel_initializer,
            autocast=False,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.filters,),
                initializer=self.bias_initializer,
                autocast=False,
            )
        else:
            self.bias = None

    def _check_output_not_empty(self, input_shape):
        out = self.compute_output_shape(input_shape)
        _check_positive_spatial(
            out,
            f"the output (kernel {self.kernel_size}, strides "
            f"{self.strides}, padding '{self.padding}')",
            f"StdConv2D '{self.name}'",
        )

    def standardized_kernel(self):
        """The kernel actually convolved with (HWIO, standardised)."""
        w = ops.convert_to_tensor(self.kernel)
        axes = (0, 1, 2)
        w = w - ops.mean(w, axis=axes, keepdims=True)
        # Second centring pass: removes the rounding error of the first mean,
        # which matters when a channel's mean is large relative to its spread
        # (cheap: it only touches the kernel).
        w = w - ops.mean(w, axis=axes, keepdims=True)
        # Biased variance, as F.batch_norm(training=True) in timm.
        var = ops.mean(ops.square(w), axis=axes, keepdims=True)
        return w * ops.rsqrt(var + self.epsilon)

    def call(self, inputs):
        x = ops.cast(inputs, self.compute_dtype)
        kernel = ops.cast(self.standardized_kernel(), self.compute_dtype)
        padding = "valid"
        if self.padding == "same":
            height, width = x.shape[1], x.shape[2]
            if height is None or width is None:
                # Only when tracing a TF graph with unknown spatial dims: TF's
                # native "SAME" is the very definition timm reproduces.
                padding = "same"
            else:
                pad_h = _same_padding(
                    height, self.kernel_size[0], self.strides[0]
                )
                pad_w = _same_padding(
                    width, self.kernel_size[1], self.strides[1]
                )
                if any(pad_h + pad_w):
                    x = ops.pad(x, ((0, 0), pad_h, pad_w, (0, 0)))
        x = ops.conv(
            x,
            kernel,
            strides=self.strides,
            padding=padding,
            data_format="channels_last",
        )
        if self.bias is not None:
            x = x + ops.cast(self.bias, self.compute_dtype)
        return x

    def compute_output_shape(self, input_shape):
        return (
            input_shape[0],
            _conv_output_size(
                input_shape[1], self.kernel_size[0], self.strides[0],
                self.padding,
            ),
            _conv_output_size(
                input_shape[2], self.kernel_size[1], self.strides[1],
                self.padding,
            ),
            self.filters,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                "epsilon": self.epsilon,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
            }
        )
        return config


def _conv_norm(conv, norm, x):
    return call_inline(norm, call_inline(conv, x))


def _group_norm(name, num_groups, epsilon, dtype=None):
    # keras.layers.GroupNormalization matches torch.nn.GroupNorm: contiguous
    # channel groups, biased variance over (H, W, C/G), rsqrt(var + eps), then
    # per-channel affine (gamma/beta = torch weight/bias = npz scale/bias).
    # It also computes its statistics in float32 under mixed precision.
    return keras.layers.GroupNormalization(
        groups=num_groups, axis=-1, epsilon=epsilon, dtype=dtype, name=name
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(keras.layers.Layer):
    """Non-pre-activation bottleneck unit with StdConv + GroupNorm.

    ``conv1`` 1x1 -> ``gn1`` -> ReLU -> ``conv2`` 3x3 (carries the stride) ->
    ``gn2`` -> ReLU -> ``conv3`` 1x1 (4x channels) -> ``gn3``; shortcut is the
    input, or ``conv_proj`` 1x1 (stride) -> ``gn_proj`` when the channels or
    the resolution change (the rule of the original ``ResidualUnit``; timm
    builds the same projection for the first unit of each stage); ReLU after
    the add. Output channels are ``4 * filters``.

    Args:
        filters: bottleneck (middle) channels; output has ``4 * filters``.
        strides: stride of ``conv2`` and ``conv_proj``.
        std_conv_epsilon: epsilon of the weight standardisation.
        group_norm_epsilon: epsilon of every GroupNorm.
        num_groups: GroupNorm groups (must divide ``filters``).

    Example:

    >>> import numpy as np
    >>> unit = BottleneckUnit(16, strides=2, num_groups=8, name="unit1")
    >>> tuple(unit(np.zeros((1, 9, 9, 32), "float32")).shape)
    (1, 5, 5, 64)
    """

    def __init__(
        self,
        filters,
        strides=1,
        std_conv_epsilon=DEFAULT_STD_CONV_EPSILON,
        group_norm_epsilon=DEFAULT_GROUP_NORM_EPSILON,
        num_groups=32,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.strides = int(strides)
        self.std_conv_epsilon = float(std_conv_epsilon)
        self.group_norm_epsilon = float(group_norm_epsilon)
        self.num_groups = int(num_groups)
        out = 4 * self.filters
        conv = dict(epsilon=self.std_conv_epsilon, dtype=self.dtype_policy)
        gn = dict(
            num_groups=self.num_groups,
            epsilon=self.group_norm_epsilon,
            dtype=self.dtype_policy,
        )
        self.conv1 = StdConv2D(self.filters, 1, name="conv1", **conv)
        self.gn1 = _group_norm("gn1", **gn)
        self.conv2 = StdConv2D(
            self.filters, 3, strides=self.strides, name="conv2", **conv
        )
        self.gn2 = _group_norm("gn2", **gn)
        self.conv3 = StdConv2D(out, 1, name="conv3", **conv)
        self.gn3 = _group_norm("gn3", **gn)
        # Created in build() once the input channels are known.
        self.conv_proj = None
        self.gn_proj = None

    def build(self, input_shape):
        _check_nhwc(input_shape, f"BottleneckUnit '{self.name}'")
        out = 4 * self.filters
        if input_shape[-1] != out or self.strides != 1:
            self.conv_proj = StdConv2D(
                out, 1, strides=self.strides, epsilon=self.std_conv_epsilon,
                dtype=self.dtype_policy, name="conv_proj",
            )
            self.gn_proj = _group_norm(
                "gn_proj", self.num_groups, self.group_norm_epsilon,
                dtype=self.dtype_policy,
            )
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        # Build the sublayers here so their variable paths nest under ours.
        shape = input_shape
        for conv, norm in (
            (self.conv1, self.gn1),
            (self.conv2, self.gn2),
            (self.conv3, self.gn3),
        ):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)

    @property
    def has_projection(self):
        return self.conv_proj is not None

    def call(self, inputs):
        shortcut = inputs
        if self.conv_proj is not None:
            shortcut = _conv_norm(self.conv_proj, self.gn_proj, inputs)
        x = ops.relu(_conv_norm(self.conv1, self.gn1, inputs))
        x = ops.relu(_conv_norm(self.conv2, self.gn2, x))
        x = _conv_norm(self.conv3, self.gn3, x)
        return ops.relu(x + shortcut)

    def compute_output_shape(self, input_shape):
        return (
            input_shape[0],
            _conv_output_size(input_shape[1], 3, self.strides, "same"),
            _conv_output_size(input_shape[2], 3, self.strides, "same"),
            4 * self.filters,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "strides": self.strides,
                "std_conv_epsilon": self.std_conv_epsilon,
                "group_norm_epsilon": self.group_norm_epsilon,
                "num_groups": self.num_groups,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(keras.layers.Layer):
    """A stage (``block{i}``) of ``num_units`` bottleneck units.

    Units are named ``unit1 .. unit{num_units}``; only ``unit1`` carries the
    stride (and, when shapes change, the projection shortcut).

    Args:
        num_units: number of bottleneck units.
        filters: bottleneck channels of every unit (output is 4x).
        strides: stride of the first unit.
        std_conv_epsilon, group_norm_epsilon, num_groups: as in
            `BottleneckUnit`.

    Example:

    >>> import numpy as np
    >>> stage = ResNetStage(2, 16, strides=2, num_groups=8, name="block2")
    >>> tuple(stage(np.zeros((1, 8, 8, 64), "float32")).shape)
    (1, 4, 4, 64)
    """

    def __init__(
        self,
        num_units,
        filters,
        strides=1,
        std_conv_epsilon=DEFAULT_STD_CONV_EPSILON,
        group_norm_epsilon=DEFAULT_GROUP_NORM_EPSILON,
        num_groups=32,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_units = int(num_units)
        if self.num_units < 1:
            raise ValueError(
                f"`num_units` must be >= 1. Received: {num_units}"
            )
        self.filters = int(filters)
        self.strides = int(strides)
        self.std_conv_epsilon = float(std_conv_epsilon)
        self.group_norm_epsilon = float(group_norm_epsilon)
        self.num_groups = int(num_groups)
        self.units = [
            BottleneckUnit(
                self.filters,
                strides=self.strides if j == 0 else 1,
                std_conv_epsilon=self.std_conv_epsilon,
                group_norm_epsilon=self.group_norm_epsilon,
                num_groups=self.num_groups,
                dtype=self.dtype_policy,
                name=f"unit{j + 1}",  # 1-based, as in the checkpoints
            )
            for j in range(self.num_units)
        ]

    def build(self, input_shape):
        _check_nhwc(input_shape, f"ResNetStage '{self.name}'")
        shape = input_shape
        for unit in self.units:
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, inputs):
        x = inputs
        for unit in self.units:
            x = call_inline(unit, x)
        return x

    def compute_output_shape(self, input_shape):
        return self.units[0].compute_output_shape(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_units": self.num_units,
                "filters": self.filters,
                "strides": self.strides,
                "std_conv_epsilon": self.std_conv_epsilon,
                "group_norm_epsilon": self.group_norm_epsilon,
                "num_groups": self.num_groups,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetBackbone(keras.layers.Layer):
    """BiT-style ResNet feature extractor of the hybrid ResNet+ViT models.

    Root (``conv_root`` StdConv 7x7/2 SAME, ``gn_root``, ReLU, max pool
    3x3/2 SAME) followed by one ``ResNetStage`` per entry of
    ``block_units`` (named ``block1``, ``block2``, ...). Returns the final
    feature map ``(B, ceil(H / s), ceil(W / s), C)`` with
    ``s = resnet_feature_stride(block_units)`` (16 for 3 stages, 32 for 4)
    and ``C = resnet_out_channels(block_units, width)``.

    Paper configurations: ``(3, 4, 9)`` R50+ViT-B/16 (stride 16, 1024 ch),
    ``(3, 4, 6, 3)`` R50+ViT-L/32 and ``(2, 2, 2, 2)`` R26+ViT-S/32, B/32
    (stride 32, 2048 ch), all with ``width=64``.

    Args:
        block_units: units per stage, 1 to 4 stages, e.g. ``(3, 4, 9)``.
        width: root channels; stage ``i`` uses ``width * 2**i`` bottleneck
            and ``4 * width * 2**i`` output channels (64 in the paper).
        std_conv_epsilon: weight-standardisation epsilon (timm's 1e-8).
        group_norm_epsilon: GroupNorm epsilon (timm 1e-5; flax 1e-6).
        num_groups: GroupNorm groups (32; must divide ``width``).
        name: layer name, default ``"resnet"`` (root of the variable paths,
            see the module docstring).

    Example:

    >>> import numpy as np
    >>> backbone = ResNetBackbone((1, 1, 1), width=16, num_groups=8)
    >>> tuple(backbone(np.zeros((2, 64, 64, 3), "float32")).shape)
    (2, 4, 4, 256)
    >>> backbone.conv_root.kernel.path
    'resnet/conv_root/kernel'
    """

    def __init__(
        self,
        block_units=(3, 4, 9),
        width=64,
        std_conv_epsilon=DEFAULT_STD_CONV_EPSILON,
        group_norm_epsilon=DEFAULT_GROUP_NORM_EPSILON,
        num_groups=32,
        **kwargs,
    ):
        kwargs.setdefault("name", "resnet")
        super().__init__(**kwargs)
        self.block_units = _validate_block_units(block_units)
        self.width = int(width)
        if self.width < 1:
            raise ValueError(f"`width` must be >= 1. Received: {width}")
        self.std_conv_epsilon = float(std_conv_epsilon)
        self.group_norm_epsilon = float(group_norm_epsilon)
        self.num_groups = int(num_groups)
        self.conv_root = StdConv2D(
            self.width, 7, strides=2, padding="same",
            epsilon=self.std_conv_epsilon, dtype=self.dtype_policy,
            name="conv_root",
        )
        self.gn_root = _group_norm(
            "gn_root", self.num_groups, self.group_norm_epsilon,
            dtype=self.dtype_policy,
        )
        self.stages = [
            ResNetStage(
                n,
                self.width * 2**i,
                strides=1 if i == 0 else 2,
                std_conv_epsilon=self.std_conv_epsilon,
                group_norm_epsilon=self.group_norm_epsilon,
                num_groups=self.num_groups,
                dtype=self.dtype_policy,
                name=f"block{i + 1}",  # 1-based, as in the checkpoints
            )
            for i, n in enumerate(self.block_units)
        ]

    @property
    def feature_stride(self):
        return resnet_feature_stride(self.block_units)

    @property
    def out_channels(self):
        return resnet_out_channels(self.block_units, self.width)

    def build(self, input_shape):
        _check_nhwc(input_shape, f"ResNetBackbone '{self.name}'")
        self.conv_root.build(input_shape)
        shape = self.conv_root.compute_output_shape(input_shape)
        self.gn_root.build(shape)
        shape = self._pool_output_shape(shape)
        for stage in self.stages:
            stage.build(shape)
            shape = stage.compute_output_shape(shape)

    @staticmethod
    def _pool_output_shape(shape):
        return (
            shape[0],
            _conv_output_size(shape[1], 3, 2, "same"),
            _conv_output_size(shape[2], 3, 2, "same"),
            shape[3],
        )

    def call(self, inputs):
        x = ops.relu(_conv_norm(self.conv_root, self.gn_root, inputs))
        # x >= 0 after the ReLU, so 0 padding equals timm's -inf padding.
        x = _max_pool_same(x, 3, 2, pad_value=0.0)
        for stage in self.stages:
            x = call_inline(stage, x)
        return x

    def compute_output_shape(self, input_shape):
        _check_nhwc(input_shape, f"ResNetBackbone '{self.name}'")
        shape = self.conv_root.compute_output_shape(input_shape)
        shape = self._pool_output_shape(shape)
        for i, _ in enumerate(self.block_units):
            if i > 0:
                shape = (
                    shape[0],
                    _conv_output_size(shape[1], 3, 2, "same"),
                    _conv_output_size(shape[2], 3, 2, "same"),
                    shape[3],
                )
        return shape[:3] + (self.out_channels,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "block_units": list(self.block_units),
                "width": self.width,
                "std_conv_epsilon": self.std_conv_epsilon,
                "group_norm_epsilon": self.group_norm_epsilon,
                "num_groups": self.num_groups,
            }
        )
        return config
