"""The spec of a hybrid's BiT ResNet stem (``ViTSpec.resnet``): the backbone's arguments, as data."""

import dataclasses

from keras_vit.layer_rules import resnet_feature_stride, resnet_out_channels
from keras_vit.models import spec_rules
from keras_vit.models.frozen_spec import FrozenSpec


@dataclasses.dataclass(frozen=True)
class ResNetSpec(FrozenSpec):
    """The BiT ResNet stem of a hybrid ResNet+ViT (``keras_vit.layers.ResNetBackbone``).

    The field names are the backbone's arguments. The defaults are timm's hybrid numerics;
    the original google-research checkpoints were trained with ``std_conv_form="std_eps"``,
    ``std_conv_epsilon=1e-5`` and ``group_norm_epsilon=1e-6`` (flax's GroupNorm).

    Args:
        block_units: bottleneck units per stage, 1 to 4 stages: ``(3, 4, 9)`` is the
            paper's R50 without its last stage (total stride 16).
        width: channels of the root convolution; stage ``i`` has ``width * 2**i``
            bottleneck and 4x that many output channels.
        num_groups: GroupNorm groups.
        std_conv_form: the weight standardisation, ``"var_eps"``:
            ``(w - mean) / sqrt(var + eps)`` (timm) or ``"std_eps"``:
            ``(w - mean) / (std + eps)`` (the original JAX code).
        std_conv_epsilon: its epsilon (timm 1e-8, the original 1e-5).
        group_norm_epsilon: GroupNorm epsilon (torch 1e-5, flax 1e-6).

    >>> ResNetSpec((3, 4, 9)).stride, ResNetSpec((2, 2, 2, 2)).out_channels
    (16, 2048)
    """

    block_units: tuple = (3, 4, 9)
    width: int = 64
    num_groups: int = 32
    std_conv_form: str = "var_eps"
    std_conv_epsilon: float = 1e-8
    group_norm_epsilon: float = 1e-5

    def __post_init__(self):
        self._settle("block_units", spec_rules.check_resnet(self))

    @property
    def stride(self):
        return resnet_feature_stride(self.block_units)

    @property
    def out_channels(self):
        return resnet_out_channels(self.block_units, self.width)
