"""Multi-head attention pooling: a learned query attends over the tokens (SigLIP's head)."""

import keras
from keras import ops

from keras_vit.layer_rules import check_heads
from keras_vit.layers.dense import Dense
from keras_vit.layers.encoder_block import MlpBlock
from keras_vit.layers.initializers import deferrable, deferrable_weight
from keras_vit.layers.inline import composite_config, sublayer_policy
from keras_vit.layers.layer_norm import make_norm


@keras.saving.register_keras_serializable(package="keras_vit")
class AttentionPooling(keras.layers.Layer):
    """Pools ``(batch, tokens, width)`` to ``(batch, width)`` with one learned query.

    The MAP head of big_vision (``MAPHead``) and timm (``AttentionPoolLatent``, its
    ``global_pool="map"``), which SigLIP's image towers use: a learned ``latent`` token is
    projected to a query that attends over the tokens' keys and values (one
    ``(width, 2 * width)`` projection, keys | values), the result is projected out, and an
    MLP adds to it as in an encoder block: ``y + MLP(LN(y))``. The attention is
    ``keras.ops.dot_product_attention``: one query per image, where no other form pays.

    Args:
        num_heads: attention heads; must divide the width.
        mlp_dim: the MLP's hidden width.
        num_prefix_tokens: tokens at the start (class, registers) left out of the pool.
        layer_norm_epsilon: the norm's epsilon.
        gelu_approximate, mlp_activation: the MLP's activation, see ``MlpBlock``.
        qkv_bias: a bias on the query and key/value projections.
        norm_type: the norm's kind, see ``keras_vit.layers.layer_norm.make_norm``.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Sublayer paths: ``latent``, ``query``, ``key_value``, ``out``, ``norm``, ``mlp/fc1``,
    ``mlp/fc2``.

    Examples:
        >>> import numpy as np
        >>> tuple(AttentionPooling(num_heads=2, mlp_dim=16)(np.zeros((3, 5, 8), "float32")).shape)
        (3, 8)
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        num_prefix_tokens=0,
        *,
        layer_norm_epsilon=1e-6,
        gelu_approximate=True,
        mlp_activation="gelu",
        qkv_bias=True,
        norm_type="layernorm",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.norm_type = norm_type
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu_approximate = bool(gelu_approximate)
        self.mlp_activation = mlp_activation
        self.qkv_bias = bool(qkv_bias)

    def build(self, input_shape):
        width = input_shape[-1]
        check_heads(width, self.num_heads, f"{self.name}: width")
        # Sublayers made and built here, in this layer's name scope, so that their paths
        # are complete (see EncoderBlock.build).
        self.latent = deferrable_weight(
            self, name="latent", shape=(1, 1, width), initializer=keras.initializers.RandomNormal(stddev=width**-0.5)
        )

        def dense(units, name, use_bias=True):
            layer = deferrable(Dense(units, use_bias=use_bias, name=name, dtype=sublayer_policy(self, name)))
            layer.build((None, width))
            return layer

        self.query = dense(width, "query", self.qkv_bias)
        self.key_value = dense(2 * width, "key_value", self.qkv_bias)
        self.out = dense(width, "out")
        self.norm = deferrable(
            make_norm(self.norm_type, self.layer_norm_epsilon, name="norm", dtype=sublayer_policy(self, "norm"))
        )
        self.norm.build((None, width))
        self.mlp = MlpBlock(
            self.mlp_dim,
            gelu_approximate=self.gelu_approximate,
            activation=self.mlp_activation,
            name="mlp",
            dtype=self.dtype_policy,
        )
        self.mlp.build((None, width))

    def call(self, tokens):
        tokens = tokens[:, self.num_prefix_tokens :]
        batch, length, width = ops.shape(tokens)[0], ops.shape(tokens)[1], tokens.shape[-1]
        heads = (self.num_heads, width // self.num_heads)
        query = self.query(ops.reshape(ops.cast(self.latent, tokens.dtype), (1, width)))
        query = ops.broadcast_to(ops.reshape(query, (1, 1, *heads)), (batch, 1, *heads))
        key_value = self.key_value(ops.reshape(tokens, (-1, width)))
        key, value = ops.unstack(ops.reshape(key_value, (batch, length, 2, *heads)), 2, axis=2)
        pooled = ops.reshape(ops.dot_product_attention(query, key, value), (batch, width))
        pooled = self.out(pooled)
        return pooled + self.mlp(self.norm(pooled))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return composite_config(self, super().get_config())
