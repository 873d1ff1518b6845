"""The pre-LayerNorm Transformer encoder block: attention then MLP, each residual."""

import keras
from keras import ops

from keras_vit.layers import legacy
from keras_vit.layers.activations import mlp_activation
from keras_vit.layers.attention import attention_layer
from keras_vit.layers.dense import Dense
from keras_vit.layers.initializers import deferrable
from keras_vit.layers.inline import call_inline, composite_config, sublayer_policy
from keras_vit.layers.layer_norm import make_norm
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.remat import rematerialised
from keras_vit.layers.stochastic_depth import DropPath


def dropout_rows(dropout, rows, tokens, training):
    """``dropout`` of 2-D token rows, drawn over the ``(batch, tokens, ...)`` view of the
    3-D ``tokens`` they came from (None: over the rows as they are).

    The same random numbers in the same order either way; XLA compiles a mask over the
    tokens' own shape well, and one over rows whose count it infers from a reshape slowly.
    Where nothing is dropped the rows stay as they are.
    """
    if not training or dropout.rate == 0 or tokens is None:
        return call_inline(dropout, rows, training=training)
    width = rows.shape[-1]
    shape = ops.shape(tokens)
    dropped = call_inline(dropout, ops.reshape(rows, (shape[0], shape[1], width)), training=training)
    return ops.reshape(dropped, (-1, width))


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Dense -> GELU -> dropout -> Dense -> dropout, the paper's MLP (eq. 3).

    Args:
        mlp_dim: hidden width.
        dropout_rate: dropout after each Dense.
        gelu_approximate: ``True`` for the tanh approximation that the original JAX code
            (flax's ``nn.gelu``) uses, ``False`` for the exact erf form of timm and HF.
        activation: ``"gelu"`` (the form above), ``"quick_gelu"`` (CLIP's) or ``"silu"``.
        gated: ``fc1`` projects to twice ``mlp_dim``, a gate then a value, and the hidden
            state is ``activation(gate) * value`` (GLU; SwiGLU with ``"silu"``: AIMv2).
        use_bias: biases on ``fc1`` and ``fc2``.
        hidden_norm: a norm of this kind (``"layernorm"``, ``"rmsnorm"``) on the hidden state
            before ``fc2`` (sublayer ``norm``; EVA-02's, timm's ``scale_mlp``); None for none.
        hidden_norm_epsilon: its epsilon.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    ``fc1`` and ``fc2`` are Keras ``Dense`` layers (``keras_vit.layers.Dense``):
    ``model.quantize(...)`` quantizes them,
    and ``get_config`` keeps their quantized policies (see ``dtype_policy_config``). The
    GELU is ``fc1``'s activation and both run on the token rows flattened to 2-D, the form
    in which TensorFlow's graph optimizer makes the matmul, its bias and the GELU one kernel.

    Examples:
        >>> import numpy as np
        >>> tuple(MlpBlock(16)(np.zeros((1, 3, 8), "float32")).shape)
        (1, 3, 8)
        >>> tuple(MlpBlock(16)(np.zeros((3, 8), "float32")).shape)  # token rows stay rows
        (3, 8)
    """

    def __init__(
        self,
        mlp_dim,
        *,
        dropout_rate=0.0,
        gelu_approximate=True,
        activation="gelu",
        gated=False,
        use_bias=True,
        hidden_norm=None,
        hidden_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_norm = hidden_norm
        self.hidden_norm_epsilon = float(hidden_norm_epsilon)
        self.gated = bool(gated)
        self.use_bias = bool(use_bias)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.gelu_approximate = bool(gelu_approximate)
        mlp_activation(activation, self.gelu_approximate)  # a bad name fails here, not at build
        self.activation = activation

    def build(self, input_shape):
        # Sublayers are made and built here, in this layer's name scope, so that their
        # paths are complete: a reloaded quantized block finds their policies by path.
        activation = mlp_activation(self.activation, self.gelu_approximate)
        # Ungated, the activation is fc1's own (fused with its matmul: see above); gated, it
        # applies to the gate half alone.
        self._gate_activation = keras.activations.get(activation) if self.gated else None
        self.fc1 = deferrable(
            Dense(
                self.mlp_dim * (2 if self.gated else 1), activation=None if self.gated else activation,
                use_bias=self.use_bias, name="fc1", dtype=sublayer_policy(self, "fc1"),
            )
        )  # fmt: skip
        self.fc1.build(input_shape)
        self.fc2 = deferrable(
            Dense(input_shape[-1], use_bias=self.use_bias, name="fc2", dtype=sublayer_policy(self, "fc2"))
        )
        self.fc2.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout", dtype=sublayer_policy(self, "dropout"))
        # Called through call_inline, so built here: Keras' predict_on_batch runs an extra
        # eager forward pass whenever any layer of the model reports itself unbuilt.
        self.dropout.build(input_shape)
        self.norm = None
        if self.hidden_norm is not None:
            self.norm = deferrable(
                make_norm(self.hidden_norm, self.hidden_norm_epsilon, name="norm", dtype=sublayer_policy(self, "norm"))
            )
            self.norm.build(tuple(input_shape[:-1]) + (self.mlp_dim,))

    def call(self, x, training=None):
        # (batch * tokens, width) rows: see the class docstring. Rows in, rows out.
        rows = x if len(x.shape) == 2 else ops.reshape(x, (-1, x.shape[-1]))
        tokens = None if len(x.shape) == 2 else x
        hidden = call_inline(self.fc1, rows)
        if self.gated:
            hidden = self._gate_activation(hidden[:, : self.mlp_dim]) * hidden[:, self.mlp_dim :]
        rows = dropout_rows(self.dropout, hidden, tokens, training)
        if self.norm is not None:
            rows = call_inline(self.norm, rows)
        rows = dropout_rows(self.dropout, call_inline(self.fc2, rows), tokens, training)
        return rows if tokens is None else ops.reshape(rows, ops.shape(x))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return composite_config(self, super().get_config())


class PreNorm:
    """``x + MSA(LN(x))`` then ``x + MLP(LN(x))``: the paper's block form (eq. 2-3)."""

    mlp_branch = True  # the MLP a residual branch of its own, after norm2

    @staticmethod
    def forward(block, x, rows, return_attention_scores, training, rope):
        y, weights = block.attend(call_inline(block.norm1, x), return_attention_scores, training, rope)
        rows = rows + block.residual(y, x, training, block.layer_scale1)
        mlp = block.mlp_rows(call_inline(block.norm2, rows), x, training)
        return rows + block.residual(mlp, x, training, block.layer_scale2), weights


class PostNorm:
    """``x + norm1(MSA(x))`` then ``x + norm2(MLP(x))``: the norms on the attention's and the
    MLP's outputs, inside the residual (timm's ``ResPostBlock``, ``EvaBlockPostNorm``)."""

    mlp_branch = True

    @staticmethod
    def forward(block, x, rows, return_attention_scores, training, rope):
        y, weights = block.attend(x, return_attention_scores, training, rope)
        rows = rows + block.residual(call_inline(block.norm1, y), x, training, block.layer_scale1)
        mlp = call_inline(block.norm2, block.mlp_rows(rows, x, training))
        return rows + block.residual(mlp, x, training, block.layer_scale2), weights


class Parallel:
    """``x + MSA(LN(x)) + MLP(LN(x))``: the attention and the MLP side by side on ``norm1``'s
    output, their sum one residual branch (ViT-22B's; timm's ``ParallelScalingBlock``): no
    ``norm2`` and one LayerScale (``layer_scale1``)."""

    mlp_branch = False

    @staticmethod
    def forward(block, x, rows, return_attention_scores, training, rope):
        normed = call_inline(block.norm1, x)
        y, weights = block.attend(normed, return_attention_scores, training, rope)
        y = y + block.mlp_rows(ops.reshape(normed, ops.shape(rows)), x, training)
        return rows + block.residual(y, x, training, block.layer_scale1), weights


# The block forms by the name an EncoderBlock's ``form`` gives. Not layers: a form is how
# the block wires its sublayers, and every form's block saves as an EncoderBlock. Each
# ``forward`` takes the tokens and their 2-D rows, the residual stream, and returns the rows.
BLOCK_FORMS = {"pre_norm": PreNorm, "post_norm": PostNorm, "parallel": Parallel}


@keras.saving.register_keras_serializable(package="keras_vit")
class EncoderBlock(keras.layers.Layer):
    """A Transformer encoder block: attention then MLP, each residual, in one of the
    ``BLOCK_FORMS``: the paper's ``x + MSA(LN(x))`` then ``x + MLP(LN(x))`` (eq. 2-3), the
    residual post-norm one or the parallel one.

    Args:
        num_heads: attention heads.
        mlp_dim: MLP hidden width.
        form: ``"pre_norm"`` (the paper's), ``"post_norm"`` (``PostNorm``) or ``"parallel"``
            (``Parallel``).
        attention_options: the attention's options: ``"kind"`` (a name of
            ``keras_vit.layers.attention.ATTENTION_KINDS``; default ``"plain"``) and that
            class's arguments (``qkv_bias``, ``num_kv_heads``, ``qk_norm``, ...); its norms'
            epsilon defaults to ``layer_norm_epsilon``.
        mlp_options: ``MlpBlock``'s arguments (``gelu_approximate``, ``activation``, ``gated``,
            ``use_bias``, ``hidden_norm``); its norm's epsilon defaults to ``layer_norm_epsilon``.
        dropout_rate: dropout after attention and in the MLP.
        drop_path_rate: stochastic-depth rate of both residual branches.
        norm_type: ``"layernorm"`` or ``"rmsnorm"`` (``keras_vit.layers.layer_norm.make_norm``).
        layer_norm_epsilon: 1e-6 in the original code and timm, 1e-12 in HF transformers.
        layer_scale_init: scale each residual branch by a ``LayerScale`` starting at this
            value (sublayers ``layer_scale1`` and ``layer_scale2``); None for none.
        layer_scale_mlp: with ``layer_scale_init``, the MLP's branch scaled too (sublayer
            ``layer_scale2``); False: the attention's alone.
        remat: rematerialise the block in training (``keras.remat``): its activations are
            recomputed in the backward pass instead of kept; the same function.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Call with ``rope=`` a ``RotaryEmbedding``'s table for rotary position embeddings (see
    ``MultiHeadSelfAttention``), and with ``return_attention_scores=True`` to also get
    ``(batch, heads, tokens, tokens)`` attention weights. Sublayer paths follow the checkpoints: ``norm1``,
    ``attention/qkv``, ``attention/out``, ``norm2``, ``mlp/fc1``, ``mlp/fc2``. Its four
    ``Dense`` layers can be quantized, and a quantized block saves and reloads.

    Examples:
        >>> import numpy as np
        >>> block = EncoderBlock(num_heads=2, mlp_dim=16, name="block_0")
        >>> tuple(block(np.zeros((1, 5, 8), "float32")).shape)
        (1, 5, 8)
        >>> block.mlp.fc1.kernel.path
        'block_0/mlp/fc1/kernel'
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        *,
        form="pre_norm",
        attention_options=None,
        mlp_options=None,
        dropout_rate=0.0,
        drop_path_rate=0.0,
        norm_type="layernorm",
        layer_norm_epsilon=1e-6,
        layer_scale_init=None,
        layer_scale_mlp=True,
        remat=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        if form not in BLOCK_FORMS:
            raise ValueError(f"form must be one of {sorted(BLOCK_FORMS)}; got {form!r}.")
        self.form = form
        self.attention_options = dict(attention_options or {})
        self.mlp_options = dict(mlp_options or {})
        self.dropout_rate = float(dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.norm_type = norm_type
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.layer_scale_init = None if layer_scale_init is None else float(layer_scale_init)
        self.layer_scale_mlp = bool(layer_scale_mlp)
        self.remat = bool(remat)

    @classmethod
    def from_config(cls, config):
        return super().from_config(legacy.block_config(config))

    def build(self, input_shape):
        # Sublayers are made and built here, in this layer's name scope, so that their
        # paths ("block_0/attention/qkv") are complete: a reloaded quantized block finds
        # their policies by path. Attention and MLP get this block's policy as it is (a
        # map, if so) to look up their own parts. The dropouts are built too: see
        # call_inline.
        epsilon = self.layer_norm_epsilon

        def norm(name):
            return deferrable(make_norm(self.norm_type, epsilon, name=name, dtype=sublayer_policy(self, name)))

        self.norm1 = norm("norm1")
        self.attention = attention_layer(
            num_heads=self.num_heads, **{"output_norm_epsilon": epsilon, **self.attention_options},
            name="attention", dtype=self.dtype_policy,
        )  # fmt: skip
        mlp_branch = BLOCK_FORMS[self.form].mlp_branch
        self.norm2 = norm("norm2") if mlp_branch else None
        self.mlp = MlpBlock(
            self.mlp_dim, dropout_rate=self.dropout_rate, **{"hidden_norm_epsilon": epsilon, **self.mlp_options},
            name="mlp", dtype=self.dtype_policy,
        )  # fmt: skip
        self.layer_scale1 = self.layer_scale2 = None
        if self.layer_scale_init is not None:
            # The MLP's own only where it has a branch of its own, and asks for one.
            names = ("layer_scale1", "layer_scale2") if self.layer_scale_mlp and mlp_branch else ("layer_scale1",)
            for name in names:
                layer = LayerScale(self.layer_scale_init, name=name, dtype=sublayer_policy(self, name))
                layer.build((None, input_shape[-1]))
                setattr(self, name, layer)
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout", dtype=sublayer_policy(self, "dropout"))
        self.drop_path = DropPath(self.drop_path_rate, name="drop_path", dtype=sublayer_policy(self, "drop_path"))
        for layer in (self.norm1, self.attention, self.norm2, self.mlp, self.dropout, self.drop_path):
            if layer is not None:
                layer.build(input_shape)

    def call(self, x, return_attention_scores=False, training=None, rope=None):
        if self.remat and not return_attention_scores:
            # The tokens alone go through keras.remat: the flags stay Python values (traced
            # arguments, as Keras' RematScope passes them, break the branches on them), and
            # the dropouts' masks are replayed in the recomputation (keras_vit/layers/remat.py).
            randoms = (self.attention.attention_dropout, self.mlp.dropout, self.dropout, self.drop_path)
            generators = (
                [g for g in (getattr(layer, "seed_generator", None) for layer in randoms) if g] if training else []
            )
            return rematerialised(lambda tokens: self._forward(tokens, False, training, rope), x, generators)
        return self._forward(x, return_attention_scores, training, rope)

    def compute_output_spec(self, x, return_attention_scores=False, training=None, rope=None):
        # A block keeps its input's shape, in its compute dtype (Keras casts the input to
        # it): said here, building a functional model does not trace every block's call
        # (on meta tensors on torch, a graph on TensorFlow, a jaxpr on JAX). The attention
        # weights' spec, asked for by inspection alone, is still traced.
        if return_attention_scores:
            return super().compute_output_spec(x, return_attention_scores=True, training=training, rope=rope)
        return keras.KerasTensor(x.shape, dtype=self.compute_dtype)

    def attend(self, normed, return_attention_scores, training, rope):
        """The attention on ``normed`` tokens: its output rows, and its weights or None."""
        y = call_inline(
            self.attention,
            normed,
            return_attention_scores=return_attention_scores,
            training=training,
            as_rows=True,
            rope=rope,
        )
        return y if return_attention_scores else (y, None)

    def _forward(self, x, return_attention_scores, training, rope=None):
        # The residual stream stays on the 2-D token rows that the attention's output
        # projection and fc2 compute, so that TensorFlow can fuse each add into that matmul.
        rows = ops.reshape(x, (-1, x.shape[-1]))
        rows, weights = BLOCK_FORMS[self.form].forward(self, x, rows, return_attention_scores, training, rope)
        x = ops.reshape(rows, ops.shape(x))
        return (x, weights) if return_attention_scores else x

    def mlp_rows(self, rows, x, training):
        """The MLP on token ``rows`` (of the tokens ``x``)."""
        if training and self.dropout_rate > 0:  # the MLP's dropouts over the tokens' view
            return ops.reshape(
                call_inline(self.mlp, ops.reshape(rows, ops.shape(x)), training=training), ops.shape(rows)
            )
        return call_inline(self.mlp, rows, training=training)

    def residual(self, branch, x, training, layer_scale):
        """A residual branch: its LayerScale, dropout and stochastic depth."""
        if layer_scale is not None:
            branch = call_inline(layer_scale, branch)
        branch = dropout_rows(self.dropout, branch, x, training)
        if not training or self.drop_path_rate == 0:
            return branch
        # Stochastic depth drops whole images: on the (batch, tokens, width) view.
        dropped = call_inline(self.drop_path, ops.reshape(branch, ops.shape(x)), training=training)
        return ops.reshape(dropped, (-1, x.shape[-1]))

    def get_config(self):
        return composite_config(self, super().get_config())
