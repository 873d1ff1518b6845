"""Multi-head self-attention with one fused query/key/value projection, and its kinds:
the plain one (grouped key/value heads, query/key norms and rotary turns are its options,
as they go with every kind), BEiT's relative position bias and differential attention,
each a subclass that overrides one step. The fused or written-out form is chosen by
``keras_vit.layers.fused_attention``.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.layer_rules import check_differential_head_width, check_heads, check_kv_heads
from keras_vit.layers import legacy
from keras_vit.layers.dense import Dense
from keras_vit.layers.fused_attention import _flash_attention, use_fused_attention
from keras_vit.layers.initializers import deferrable, deferrable_weight
from keras_vit.layers.inline import call_inline, composite_config, sublayer_policy
from keras_vit.layers.layer_norm import make_norm
from keras_vit.layers.rotary import rotate


def relative_position_index(grid_size):
    """BEiT's index into a relative position bias table, ``(tokens, tokens)`` for a class
    token then a ``(rows, cols)`` grid: each pair of patches by their offset (one of
    ``(2 rows - 1) (2 cols - 1)``), then the three rows of the class token's pairs (class to
    patch, patch to class, class to class).

    >>> relative_position_index((2, 2)).shape, int(relative_position_index((2, 2)).max())
    ((5, 5), 11)
    """
    rows, cols = grid_size
    y, x = np.divmod(np.arange(rows * cols), cols)
    offsets = (y[:, None] - y[None, :] + rows - 1) * (2 * cols - 1) + (x[:, None] - x[None, :] + cols - 1)
    distances = (2 * rows - 1) * (2 * cols - 1)
    index = np.empty((rows * cols + 1,) * 2, "int32")
    index[1:, 1:] = offsets
    index[0, :], index[:, 0], index[0, 0] = distances, distances + 1, distances + 2
    return index


def differential_lambda_init(index):
    """Differential attention's starting weight in block ``index`` (the Differential
    Transformer's ``0.8 - 0.6 exp(-0.3 index)``, as timm sets it).

    >>> round(differential_lambda_init(0), 2), round(differential_lambda_init(10), 3)
    (0.2, 0.77)
    """
    return 0.8 - 0.6 * math.exp(-0.3 * index)


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Scaled dot-product self-attention over all tokens: the plain kind, and the base of
    the others (``RelativePositionAttention``, ``DifferentialAttention``).

    Query, key and value come from one ``(width, 3 * width)`` matmul (columns ordered
    query | key | value, heads contiguous inside each): one large matmul instead of
    three, and timm's ``qkv`` layout transposed. The attention itself is fused or written
    out as ``use_fused_attention`` says.

    The two projections are Keras ``Dense`` layers (``qkv`` and ``out``; see
    ``keras_vit.layers.Dense``), so
    ``model.quantize("int8" | "float8" | "int4")`` quantizes them, and the quantized
    policies are saved with the layer (see ``dtype_policy_config``).

    Args:
        num_heads: attention heads; must divide the token width.
        attention_dropout_rate: dropout on the attention weights (the paper uses 0).
        qkv_bias: add a bias to the query, key and value projections (the paper's and
            timm's default; some timm models have none).
        out_bias: add a bias to the output projection (AIMv2's has none).
        num_kv_heads: key and value heads, each shared by ``num_heads / num_kv_heads``
            query heads (grouped-query attention: ``qkv`` projects to ``(num_heads + 2
            num_kv_heads) head_dim`` columns, query | key | value); None: ``num_heads``.
        qk_norm: a norm of this kind (``"layernorm"``, ``"rmsnorm"``) on each head's
            queries and keys (sublayers ``q_norm``, ``k_norm``, over the head's channels),
            before the rotary turn; None for none.
        output_norm: a norm of this kind on the heads' output before the output projection
            (sublayer ``norm``; EVA-02 CLIP's and BEiT-3's, timm's ``scale_attn_inner`` /
            ``scale_attn_norm``); None for none.
        output_norm_epsilon: its epsilon, and the query/key norms'.
        rope_interleaved: the rotary table's channel pairs are neighbours (``rotate``'s
            ``interleaved``; EVA-02's), not the two halves (DINOv3's).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Call with ``rope=`` a ``RotaryEmbedding``'s table to turn the queries and keys by it
    (rotary position embeddings), and with ``as_rows=True`` for the output as the
    ``(batch * tokens, width)`` rows that the output projection computes, as
    ``EncoderBlock`` adds them to its residual stream.

    Examples:
        >>> import numpy as np
        >>> layer = MultiHeadSelfAttention(num_heads=2)
        >>> out, weights = layer(np.zeros((1, 5, 8), "float32"), return_attention_scores=True)
        >>> tuple(out.shape), tuple(weights.shape)
        ((1, 5, 8), (1, 2, 5, 5))
    """

    def __init__(
        self,
        num_heads,
        *,
        attention_dropout_rate=0.0,
        qkv_bias=True,
        out_bias=True,
        num_kv_heads=None,
        qk_norm=None,
        output_norm=None,
        output_norm_epsilon=1e-6,
        rope_interleaved=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.num_kv_heads = int(num_heads if num_kv_heads is None else num_kv_heads)
        check_kv_heads(self.num_heads, self.num_kv_heads)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.qkv_bias = bool(qkv_bias)
        self.out_bias = bool(out_bias)
        self.qk_norm = qk_norm
        self.output_norm = output_norm
        self.output_norm_epsilon = float(output_norm_epsilon)
        self.rope_interleaved = bool(rope_interleaved)

    @classmethod
    def from_config(cls, config):
        kind, config = legacy.attention_config(config)
        return keras.layers.Layer.from_config.__func__(ATTENTION_KINDS[kind] if kind else cls, config)

    def build(self, input_shape):
        width = input_shape[-1]
        check_heads(width, self.num_heads, f"{self.name}: width")
        self.head_dim = width // self.num_heads
        # Made and built here, inside this layer's name scope, so that their paths
        # (".../attention/qkv") are complete: a reloaded quantized layer finds their
        # policies by path (see `sublayer_policy`).
        columns = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        self.qkv = deferrable(Dense(columns, use_bias=self.qkv_bias, name="qkv", dtype=sublayer_policy(self, "qkv")))
        self.qkv.build(input_shape)
        self.q_norm = self.k_norm = None
        if self.qk_norm is not None:
            self.q_norm, self.k_norm = (
                deferrable(
                    make_norm(self.qk_norm, self.output_norm_epsilon, name=name, dtype=sublayer_policy(self, name))
                )
                for name in ("q_norm", "k_norm")
            )
            for layer in (self.q_norm, self.k_norm):
                layer.build((None, self.head_dim))
        self.out = deferrable(Dense(width, use_bias=self.out_bias, name="out", dtype=sublayer_policy(self, "out")))
        self.out.build(input_shape)
        self.norm = None
        if self.output_norm is not None:
            self.norm = deferrable(
                make_norm(self.output_norm, self.output_norm_epsilon, name="norm", dtype=sublayer_policy(self, "norm"))
            )
            self.norm.build(input_shape)
        self._build_kind()
        self.attention_dropout = keras.layers.Dropout(
            self.attention_dropout_rate, name="attention_dropout", dtype=sublayer_policy(self, "attention_dropout")
        )
        # Built although it has no weights: see `call_inline`.
        self.attention_dropout.build((None, self.num_heads, input_shape[1], input_shape[1]))

    def _build_kind(self):
        """A kind's own weights and sublayers (none for the plain kind)."""

    def call(self, tokens, return_attention_scores=False, training=None, as_rows=False, rope=None):
        length, width = ops.shape(tokens)[1], tokens.shape[2]  # length: a tensor where the graph has none
        qkv = self._qkv(tokens, length, width)
        if rope is not None or self.q_norm is not None or self.num_kv_heads != self.num_heads:
            qkv = self._per_head(qkv, rope)
        out, weights = self._attend(qkv, training, needs_weights=return_attention_scores)
        out = self._project_out(out, length, width, as_rows)
        return (out, weights) if return_attention_scores else out

    def _qkv(self, tokens, length, width):
        # The projections run on 2-D token rows, where TensorFlow's graph optimizer fuses a
        # matmul with its bias (see MlpBlock). (batch, length, 3, heads, dim), or with fewer
        # key/value heads the three apart: (batch, length, heads or kv heads, dim) each.
        rows = call_inline(self.qkv, ops.reshape(tokens, (-1, width)))
        if self.num_kv_heads == self.num_heads:
            return ops.reshape(rows, (-1, length, 3, self.num_heads, self.head_dim))
        queries, keys = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        parts = (rows[:, :queries], rows[:, queries : queries + keys], rows[:, queries + keys :])
        return tuple(ops.reshape(p, (-1, length, p.shape[-1] // self.head_dim, self.head_dim)) for p in parts)

    def _per_head(self, qkv, rope):
        """The query/key norms, the rotary turn and the shared key/value heads, on
        ``_qkv``'s output; ``(batch, length, 3, heads, dim)`` again."""
        query, key, value = qkv if isinstance(qkv, tuple) else ops.unstack(qkv, 3, axis=2)
        if self.q_norm is not None:
            query, key = call_inline(self.q_norm, query), call_inline(self.k_norm, key)
        if rope is not None:
            query, key = rotate(query, rope, self.rope_interleaved), rotate(key, rope, self.rope_interleaved)
        groups = self.num_heads // self.num_kv_heads
        if groups > 1:  # head h reads key/value head h // groups
            key, value = ops.repeat(key, groups, axis=2), ops.repeat(value, groups, axis=2)
        return ops.stack([query, key, value], axis=2)

    def _attend(self, qkv, training, needs_weights):
        """``(heads' output (batch, length, heads, dim), weights or None)``: fused, or
        written out where the weights are returned or dropped out."""
        dropout = bool(training) and self.attention_dropout_rate > 0
        if use_fused_attention(needs_weights=needs_weights or dropout):
            return self._fused_attention(qkv, training), None
        return self._explicit_attention(qkv, training)

    def _logit_bias(self, dtype, length):
        """A bias on the attention logits, ``(1, heads or 1, length, length)``; None for none."""
        return None

    def _fused_attention(self, qkv, training):
        # Unstacked, not sliced: the gradient of an unstack is one stack, where three
        # slices each write a zero-filled gradient of the whole qkv tensor, then summed.
        query, key, value = ops.unstack(qkv, 3, axis=2)  # (batch, length, heads, dim)
        bias = self._logit_bias(query.dtype, ops.shape(query)[1])
        if bias is not None:
            return ops.dot_product_attention(query, key, value, bias=bias, flash_attention=False)
        return ops.dot_product_attention(query, key, value, flash_attention=_flash_attention(query.shape[1], training))

    def _project_out(self, heads, length, width, as_rows):
        # heads: (batch, length, heads, dim)
        rows = ops.reshape(heads, (-1, width))
        if self.norm is not None:
            rows = call_inline(self.norm, rows)
        out = call_inline(self.out, rows)
        return out if as_rows else ops.reshape(out, (-1, length, width))

    def _explicit_attention(self, qkv, training):
        # Written out so that the weights can be returned and dropped out. Heads go first
        # in one transpose of the whole qkv tensor, and both products are batched matmuls,
        # which every backend runs without the per-operand transposes of an einsum.
        query, key, value = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), 3, axis=0)  # (batch, heads, length, dim)
        key_t = ops.swapaxes(key, -1, -2)
        scale = 1.0 / self.head_dim**0.5
        if keras.backend.standardize_dtype(query.dtype) == "float32" or math.frexp(scale)[0] == 0.5:
            # On the query, smaller than the logits, where that rounds no more than
            # scaling the logits: in float32, or by a power of two (head_dim 64: 1/8).
            logits = ops.cast(ops.matmul(query * ops.cast(scale, query.dtype), key_t), "float32")
        else:
            logits = ops.cast(ops.matmul(query, key_t), "float32") * scale
        bias = self._logit_bias("float32", ops.shape(query)[2])
        if bias is not None:
            # Added at the logits' own shape: TensorFlow's oneDNN graph rewrite would fuse the
            # batch matmul, its scale and an addend broadcast over the batch and heads (the
            # causal mask) into one kernel; kept apart, they run as the image-text benchmark's
            # TensorFlow text rows show.
            logits = logits + ops.broadcast_to(bias, ops.shape(logits))
        weights = ops.cast(ops.softmax(logits, axis=-1), query.dtype)
        dropped = call_inline(self.attention_dropout, weights, training=training)
        return ops.transpose(ops.matmul(dropped, value), (0, 2, 1, 3)), weights

    def get_config(self):
        return composite_config(self, super().get_config())


@keras.saving.register_keras_serializable(package="keras_vit")
class RelativePositionAttention(MultiHeadSelfAttention):
    """Attention with BEiT's learned bias on the logits by the two tokens' relative position
    (weight ``relative_position_bias``, one value per head and offset, read through
    ``relative_position_index``; the tokens must be a class token then the grid).

    Args:
        num_heads: see ``MultiHeadSelfAttention``, as the others.
        relative_position_grid: ``(rows, cols)`` of the patch grid.

    Examples:
        >>> import numpy as np
        >>> layer = RelativePositionAttention(2, relative_position_grid=(2, 2))
        >>> tuple(layer(np.zeros((1, 5, 8), "float32")).shape), tuple(layer.relative_position_bias.shape)
        ((1, 5, 8), (12, 2))
    """

    def __init__(self, num_heads, *, relative_position_grid, **kwargs):
        super().__init__(num_heads, **kwargs)
        self.relative_position_grid = tuple(int(side) for side in relative_position_grid)

    def _build_kind(self):
        self._relative_index = relative_position_index(self.relative_position_grid)
        self.relative_position_bias = self.add_weight(
            name="relative_position_bias",
            shape=(int(self._relative_index.max()) + 1, self.num_heads),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )

    def _logit_bias(self, dtype, length):
        length = self._relative_index.shape[0]
        table = ops.take(ops.cast(self.relative_position_bias, dtype), self._relative_index.reshape(-1), axis=0)
        return ops.expand_dims(ops.transpose(ops.reshape(table, (length, length, self.num_heads)), (2, 0, 1)), 0)


@keras.saving.register_keras_serializable(package="keras_vit")
class DifferentialAttention(MultiHeadSelfAttention):
    """Differential attention (Ye et al., "Differential Transformer", 2024; timm's
    ``DiffAttention``): each head's queries and keys split in two halves, two softmax maps,
    the second subtracted with a learned weight ``exp(q1 . k1) - exp(q2 . k2) +
    lambda_init`` (weights ``lambda_q1``, ``lambda_k1``, ``lambda_q2``, ``lambda_k2``, one
    value per half-head channel); the heads' output RMS-normed (sublayer ``sub_norm``) and
    scaled by ``1 - lambda_init``. Always written out (two maps of another width than the
    values'); the attention weights returned are the difference.

    Args:
        num_heads: see ``MultiHeadSelfAttention``, as the others.
        lambda_init: the starting part of the weight (``differential_lambda_init(block index)``).

    Examples:
        >>> import numpy as np
        >>> layer = DifferentialAttention(2, lambda_init=0.2)
        >>> out, weights = layer(np.zeros((1, 5, 8), "float32"), return_attention_scores=True)
        >>> tuple(out.shape), tuple(weights.shape), tuple(layer.lambda_q1.shape)
        ((1, 5, 8), (1, 2, 5, 5), (2,))
    """

    def __init__(self, num_heads, *, lambda_init, **kwargs):
        super().__init__(num_heads, **kwargs)
        self.lambda_init = float(lambda_init)

    def _build_kind(self):
        check_differential_head_width(self.head_dim)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, deferrable_weight(
                self, name=name, shape=(self.head_dim // 2,), dtype="float32", autocast=False,
                initializer=keras.initializers.RandomNormal(stddev=0.1),
            ))  # fmt: skip
        # timm's RmsNorm, epsilon fixed at 1e-5 whatever the model's norms take.
        self.sub_norm = deferrable(make_norm("rmsnorm", 1e-5, name="sub_norm", dtype=sublayer_policy(self, "sub_norm")))
        self.sub_norm.build((None, self.head_dim))

    def _attend(self, qkv, training, needs_weights):
        # Each head's query and key channels are two half-heads (2h and 2h + 1 of twice the
        # heads), its value channels whole: two maps over the same values.
        query, key, value = ops.unstack(qkv, 3, axis=2)  # (batch, length, heads, dim)
        half = self.head_dim // 2
        length = ops.shape(query)[1]

        def halves(x):  # (batch, length, heads, dim) -> (batch, heads, 2, length, dim / 2)
            return ops.transpose(ops.reshape(x, (-1, length, self.num_heads, 2, half)), (0, 2, 3, 1, 4))

        query, key, value = halves(query), halves(key), ops.transpose(value, (0, 2, 1, 3))
        logits = ops.matmul(ops.cast(query, "float32") * half**-0.5, ops.swapaxes(ops.cast(key, "float32"), -1, -2))
        # In the compute dtype as the written-out attention drops its weights out, then combined in float32.
        maps = ops.cast(ops.softmax(logits, axis=-1), qkv.dtype)
        maps = ops.cast(call_inline(self.attention_dropout, maps, training=training), "float32")
        weight = (
            ops.exp(ops.sum(self.lambda_q1 * self.lambda_k1))
            - ops.exp(ops.sum(self.lambda_q2 * self.lambda_k2))
            + self.lambda_init
        )
        weights = maps[:, :, 0] - weight * maps[:, :, 1]  # (batch, heads, length, length)
        weights = ops.cast(weights, qkv.dtype)
        heads = call_inline(self.sub_norm, ops.matmul(weights, value)) * (1.0 - self.lambda_init)
        return ops.transpose(heads, (0, 2, 1, 3)), weights


@keras.saving.register_keras_serializable(package="keras_vit")
class CausalAttention(MultiHeadSelfAttention):
    """Attention in which each token reads itself and the tokens before it, none after
    (CLIP's text tower): fused as the backends' own causal kernels
    (``dot_product_attention(is_causal=True)``), written out with the later tokens' logits
    at minus infinity.

    >>> import keras, numpy as np
    >>> out, weights = CausalAttention(2)(np.ones((1, 3, 8), "float32"), return_attention_scores=True)
    >>> (keras.ops.convert_to_numpy(weights)[0, 0] * 6).round().astype(int).tolist()  # sixths
    [[6, 0, 0], [3, 3, 0], [2, 2, 2]]
    """

    def _logit_bias(self, dtype, length):
        later = ops.arange(length)[None, :] > ops.arange(length)[:, None]
        return ops.cast(ops.where(later, float("-inf"), 0.0)[None, None], dtype)

    def _fused_attention(self, qkv, training):
        query, key, value = ops.unstack(qkv, 3, axis=2)
        flash = _flash_attention(query.shape[1], training)
        return ops.dot_product_attention(query, key, value, is_causal=True, flash_attention=flash)


# The attention kinds by the name an EncoderBlock's ``attention_options`` give (``"kind"``).
ATTENTION_KINDS = {
    "plain": MultiHeadSelfAttention,
    "relative_position": RelativePositionAttention,
    "differential": DifferentialAttention,
    "causal": CausalAttention,
}


def attention_layer(kind="plain", **options):
    """The attention layer of ``kind`` (an ``ATTENTION_KINDS`` name) with ``options``."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention kind must be one of {sorted(ATTENTION_KINDS)}; got {kind!r}.")
    return ATTENTION_KINDS[kind](**options)
