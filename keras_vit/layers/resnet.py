"""The BiT ResNet stem of the hybrid ResNet+ViT models: bottleneck units, stages, backbone.

The hybrids of "An Image is Worth 16x16 Words" (R50+ViT-B/16, R50+ViT-L/32, R26+ViT-S/32,
R26+ViT-B/32) cut the feature map of this ResNet into 1x1 patches. It is BiT's ResNet v1.5
without pre-activation, as the original code builds it and timm's ``_resnetv2`` rebuilds it:

- root: ``StdConv2D`` 7x7/2 -> GroupNorm -> ReLU -> max pool 3x3/2, all TF "SAME";
- stage ``i`` (from 0): ``block_units[i]`` bottleneck units of ``width * 2**i`` middle and
  4x as many output channels; every stage but the first halves the resolution in its first
  unit. The total stride is ``4 * 2**(stages - 1)``: 16 for R50+ViT-B/16's ``(3, 4, 9)``,
  32 for ``(3, 4, 6, 3)`` and R26's ``(2, 2, 2, 2)``.

Variable paths count from 0 like the encoder's ``block_{i}``; the upstream keys they come
from (the ResNet rows of ``keras_vit.checkpoints``' tables)::

    resnet/conv_root/kernel                   npz conv_root/kernel      timm stem.conv
    resnet/gn_root/{gamma,beta}               npz gn_root/{scale,bias}  timm stem.norm
    resnet/stage_{i}/unit_{j}/conv{k}/kernel  npz block{i+1}/unit{j+1}/conv{k}/kernel
                                              timm stages.{i}.blocks.{j}.conv{k}
    resnet/stage_{i}/unit_{j}/gn{k}/...       (likewise, timm norm{k})
    resnet/stage_{i}/unit_0/{conv,gn}_proj/...  timm stages.{i}.blocks.0.downsample.{conv,norm}
"""

import keras
from keras import ops

from keras_vit.layer_rules import check_block_units, check_std_conv_form, resnet_feature_stride, resnet_out_channels
from keras_vit.layers.initializers import deferrable
from keras_vit.layers.inline import call_inline
from keras_vit.layers.padding import check_feature_map, conv_output_size, max_pool_same
from keras_vit.layers.std_conv import StdConv2D


def _build_chain(layers, shape):
    # Sublayers are built here, in the owner's build: their variable paths then nest under
    # the owner's, and call_inline may skip the Keras __call__ that would otherwise build.
    for layer in layers:
        layer.build(shape)
        shape = layer.compute_output_shape(shape)
    return shape


def _conv_norm(conv, norm, x):
    return call_inline(norm, call_inline(conv, x))


class _BitLayer(keras.layers.Layer):
    """The numerics that the backbone, its stages and units share and hand down."""

    def __init__(
        self, *, std_conv_form="var_eps", std_conv_epsilon=1e-8, group_norm_epsilon=1e-5, num_groups=32, **kwargs
    ):
        super().__init__(**kwargs)
        self.std_conv_form = check_std_conv_form(std_conv_form)
        self.std_conv_epsilon = float(std_conv_epsilon)
        self.group_norm_epsilon = float(group_norm_epsilon)
        self.num_groups = int(num_groups)

    def _numerics(self):
        names = ("std_conv_form", "std_conv_epsilon", "group_norm_epsilon", "num_groups")
        return {name: getattr(self, name) for name in names}

    def _conv(self, filters, kernel_size, strides, name):
        return StdConv2D(
            filters,
            kernel_size,
            strides,
            epsilon=self.std_conv_epsilon,
            std_conv_form=self.std_conv_form,
            dtype=self.dtype_policy,
            name=name,
        )

    def _norm(self, name):
        # Keras' GroupNormalization is torch's GroupNorm (contiguous channel groups, biased
        # variance, rsqrt(var + eps), per-channel gamma/beta) and keeps float32 statistics
        # under mixed precision.
        return deferrable(
            keras.layers.GroupNormalization(
                self.num_groups, epsilon=self.group_norm_epsilon, dtype=self.dtype_policy, name=name
            )
        )

    def get_config(self):
        return {**super().get_config(), **self._numerics()}


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(_BitLayer):
    """``conv1`` 1x1 -> ``conv2`` 3x3 (the stride) -> ``conv3`` 1x1 (4x channels), each
    followed by its GroupNorm ``gn{k}`` and, but for the last, a ReLU; then the shortcut is
    added and a ReLU applied. The shortcut projects (``conv_proj`` 1x1, stride, ``gn_proj``)
    where the shape changes, as in the original ``ResidualUnit``.

    Args:
        filters: middle channels; the output has ``4 * filters``.
        strides: stride of ``conv2`` and ``conv_proj``.
        **kwargs: ``std_conv_form``, ``std_conv_epsilon``, ``group_norm_epsilon``,
            ``num_groups`` as in ``ResNetBackbone``, and the Layer arguments.

    >>> import numpy as np
    >>> unit = BottleneckUnit(16, strides=2, num_groups=8, name="unit_0")
    >>> tuple(unit(np.zeros((1, 9, 9, 32), "float32")).shape)
    (1, 5, 5, 64)
    """

    def __init__(self, filters, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.strides = int(strides)
        self.conv1, self.gn1 = self._conv(self.filters, 1, 1, "conv1"), self._norm("gn1")
        self.conv2, self.gn2 = self._conv(self.filters, 3, self.strides, "conv2"), self._norm("gn2")
        self.conv3, self.gn3 = self._conv(4 * self.filters, 1, 1, "conv3"), self._norm("gn3")
        self.conv_proj = self.gn_proj = None  # made in build, once the input channels are known

    def build(self, input_shape):
        check_feature_map(input_shape, f"BottleneckUnit '{self.name}'")
        if input_shape[-1] != 4 * self.filters or self.strides != 1:
            self.conv_proj = self._conv(4 * self.filters, 1, self.strides, "conv_proj")
            self.gn_proj = self._norm("gn_proj")
            _build_chain((self.conv_proj, self.gn_proj), input_shape)
        _build_chain((self.conv1, self.gn1, self.conv2, self.gn2, self.conv3, self.gn3), input_shape)

    def call(self, inputs):
        shortcut = inputs if self.conv_proj is None else _conv_norm(self.conv_proj, self.gn_proj, inputs)
        x = ops.relu(_conv_norm(self.conv1, self.gn1, inputs))
        x = ops.relu(_conv_norm(self.conv2, self.gn2, x))
        return ops.relu(_conv_norm(self.conv3, self.gn3, x) + shortcut)

    def compute_output_shape(self, input_shape):
        sides = [conv_output_size(size, 3, self.strides) for size in input_shape[1:3]]
        return (input_shape[0], *sides, 4 * self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "strides": self.strides}


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(_BitLayer):
    """``num_units`` bottleneck units ``unit_0 ..``; the first carries the stride.

    Args:
        num_units: how many units.
        filters: middle channels of every unit (the output has 4x).
        strides: stride of the first unit.
        **kwargs: as in ``BottleneckUnit``.

    >>> import numpy as np
    >>> stage = ResNetStage(2, 16, strides=2, num_groups=8, name="stage_1")
    >>> tuple(stage(np.zeros((1, 8, 8, 64), "float32")).shape)
    (1, 4, 4, 64)
    """

    def __init__(self, num_units, filters, strides=1, **kwargs):
        super().__init__(**kwargs)
        if int(num_units) < 1:
            raise ValueError(f"`num_units` must be >= 1. Received: num_units={num_units!r}")
        self.num_units, self.filters, self.strides = int(num_units), int(filters), int(strides)
        self.units = [
            BottleneckUnit(
                self.filters,
                self.strides if j == 0 else 1,
                **self._numerics(),
                dtype=self.dtype_policy,
                name=f"unit_{j}",
            )
            for j in range(self.num_units)
        ]

    def build(self, input_shape):
        check_feature_map(input_shape, f"ResNetStage '{self.name}'")
        _build_chain(self.units, input_shape)

    def call(self, inputs):
        x = inputs
        for unit in self.units:
            x = call_inline(unit, x)
        return x

    def compute_output_shape(self, input_shape):
        return self.units[0].compute_output_shape(input_shape)

    def get_config(self):
        return {**super().get_config(), "num_units": self.num_units, "filters": self.filters, "strides": self.strides}


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetBackbone(_BitLayer):
    """The BiT ResNet feature extractor of the hybrids: root, then ``stage_0 ..``.

    Maps ``(B, H, W, C)`` images to ``(B, ceil(H / s), ceil(W / s), out_channels)`` with
    ``s = resnet_feature_stride(block_units)``. The paper's hybrids use ``width=64`` and
    ``(3, 4, 9)`` (R50+ViT-B/16), ``(3, 4, 6, 3)`` (R50+ViT-L/32), ``(2, 2, 2, 2)`` (R26).
    The numerics default to timm's; the original code's are ``std_conv_form="std_eps"``,
    ``std_conv_epsilon=1e-5``, ``group_norm_epsilon=1e-6``.

    Args:
        block_units: units per stage, 1 to 4 stages.
        width: root channels; stage ``i`` has ``width * 2**i`` middle channels.
        std_conv_form: ``"var_eps"`` or ``"std_eps"``, see ``StdConv2D``.
        std_conv_epsilon: epsilon of the weight standardisation.
        group_norm_epsilon: epsilon of every GroupNorm.
        num_groups: GroupNorm groups; must divide ``width``.
        name: the root of the variable paths, ``"resnet"`` by default.

    >>> import numpy as np
    >>> backbone = ResNetBackbone((1, 1, 1), width=16, num_groups=8)
    >>> tuple(backbone(np.zeros((2, 64, 64, 3), "float32")).shape)
    (2, 4, 4, 256)
    >>> backbone.stages[1].units[0].conv_proj.kernel.path
    'resnet/stage_1/unit_0/conv_proj/kernel'
    """

    def __init__(
        self,
        block_units=(3, 4, 9),
        width=64,
        *,
        std_conv_form="var_eps",
        std_conv_epsilon=1e-8,
        group_norm_epsilon=1e-5,
        num_groups=32,
        **kwargs,
    ):
        kwargs.setdefault("name", "resnet")
        super().__init__(
            std_conv_form=std_conv_form,
            std_conv_epsilon=std_conv_epsilon,
            group_norm_epsilon=group_norm_epsilon,
            num_groups=num_groups,
            **kwargs,
        )
        self.block_units = check_block_units(block_units)
        if int(width) < 1:
            raise ValueError(f"`width` must be >= 1. Received: width={width!r}")
        self.width = int(width)
        self.conv_root, self.gn_root = self._conv(self.width, 7, 2, "conv_root"), self._norm("gn_root")
        self.stages = [
            ResNetStage(
                units,
                self.width * 2**i,
                1 if i == 0 else 2,
                **self._numerics(),
                dtype=self.dtype_policy,
                name=f"stage_{i}",
            )
            for i, units in enumerate(self.block_units)
        ]

    def build(self, input_shape):
        check_feature_map(input_shape, f"ResNetBackbone '{self.name}'")
        shape = _build_chain((self.conv_root, self.gn_root), input_shape)
        pooled = [conv_output_size(size, 3, 2) for size in shape[1:3]]
        _build_chain(self.stages, (shape[0], *pooled, shape[3]))

    def call(self, inputs, return_stages=False):
        """The feature map; with ``return_stages``, also every stage's output (a list)."""
        x = ops.relu(_conv_norm(self.conv_root, self.gn_root, inputs))
        # x >= 0 after the ReLU, so padding with 0 equals timm's -inf padding (see max_pool_same).
        x = max_pool_same(x, 3, 2, pad_value=0.0)
        stages = []
        for stage in self.stages:
            x = call_inline(stage, x)
            stages.append(x)
        return (x, stages) if return_stages else x

    def compute_output_shape(self, input_shape):
        check_feature_map(input_shape, f"ResNetBackbone '{self.name}'")
        # Every "SAME" step rounds up, and nested ceilings are the ceiling of the product.
        stride = resnet_feature_stride(self.block_units)
        sides = [conv_output_size(size, 1, stride) for size in input_shape[1:3]]
        return (input_shape[0], *sides, resnet_out_channels(self.block_units, self.width))

    def get_config(self):
        return {**super().get_config(), "block_units": list(self.block_units), "width": self.width}
