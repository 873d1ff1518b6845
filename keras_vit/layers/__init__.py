"""Keras layers of the ViT, each serialisable and written with ``keras.ops`` only."""

from keras_vit.layers.activations import gelu_erf, gelu_tanh, quick_gelu
from keras_vit.layers.attention import (
    CausalAttention,
    DifferentialAttention,
    MultiHeadSelfAttention,
    RelativePositionAttention,
)
from keras_vit.layers.attention_pooling import AttentionPooling
from keras_vit.layers.dense import Dense
from keras_vit.layers.encoder_block import EncoderBlock, MlpBlock
from keras_vit.layers.heads import TokenPooling
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.layers.resnet import (
    BottleneckUnit,
    ResNetBackbone,
    ResNetStage,
    StdConv2D,
    check_block_units,
    resnet_feature_stride,
    resnet_out_channels,
)
from keras_vit.layers.rotary import RotaryEmbedding, rotate
from keras_vit.layers.stochastic_depth import DropPath
from keras_vit.layers.tokens import (
    ClassToken,
    DistillationToken,
    PatchTokens,
    PositionEmbedding,
    RegisterTokens,
    sincos_2d_position_embedding,
)
