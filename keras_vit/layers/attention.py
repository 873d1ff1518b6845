"""Multi-head self-attention with one fused query/key/value projection.

Attention has two forms, both in ``keras.ops``: the fused
``keras.ops.dot_product_attention`` (each backend's own kernel: PyTorch's
``scaled_dot_product_attention``, cuDNN or XLA's on JAX, flash attention where it runs) and
the written-out softmax of the scores, which can also return the weights and drop them
out. ``use_fused_attention`` is the one place that chooses between them, and
``KERAS_VIT_FUSED_ATTN`` (or ``set_fused_attention``) overrides it, as timm's
``TIMM_FUSED_ATTN`` does.
"""

import functools
import math
import os

import keras
import numpy as np
from keras import ops

from keras_vit.layers.dense import Dense
from keras_vit.layers.initializers import deferrable, deferrable_weight
from keras_vit.layers.inline import call_inline, composite_config, sublayer_policy
from keras_vit.layers.layer_norm import make_norm
from keras_vit.layers.rotary import rotate

FUSED_ATTENTION_ENV = "KERAS_VIT_FUSED_ATTN"
_override = []  # set_fused_attention's value, when set


def set_fused_attention(enabled):
    """Runs every attention layer fused (``True``), written out (``False``), or as
    ``use_fused_attention`` chooses by default (``None``); for this process, from the
    next trace or eager call on. The environment variable ``KERAS_VIT_FUSED_ATTN=0`` or
    ``=1`` does the same before start-up. Written out is the reference form: parity
    tests and debugging use it to rule the backends' kernels out.

    >>> set_fused_attention(False); use_fused_attention()
    False
    >>> set_fused_attention(None)
    """
    if enabled not in (True, False, None):
        raise ValueError(f"set_fused_attention takes True, False or None; got {enabled!r}.")
    _override[:] = [] if enabled is None else [enabled]


def _environment_override():
    value = os.environ.get(FUSED_ATTENTION_ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value in ("1", "true", "on"):
        return True
    if value in ("0", "false", "off"):
        return False
    raise ValueError(f"{FUSED_ATTENTION_ENV} must be 0, 1 or auto; got {value!r}.")


def use_fused_attention(needs_weights=False):
    """Whether attention runs as the fused ``keras.ops.dot_product_attention``.

    Never where the weights themselves are needed (returned, or dropped out). Otherwise
    ``set_fused_attention``'s value, else ``KERAS_VIT_FUSED_ATTN``'s, else the default:
    fused on PyTorch and on JAX on an accelerator, written out on TensorFlow (whose
    ``dot_product_attention`` is two einsums) and on JAX on a CPU (the benchmark's
    ``--fused-attention`` rows in docs/performance.md chose it).
    """
    if needs_weights:
        return False
    if _override:
        return _override[0]
    forced = _environment_override()
    if forced is not None:
        return forced
    backend = keras.config.backend()
    return backend == "torch" or (backend == "jax" and _jax_platform() != "cpu")


def _flash_attention(length, training):
    """``keras.ops.dot_product_attention``'s ``flash_attention``: None (Keras chooses), or
    False on JAX on a GPU in training at an odd token count (a class token and a square
    grid: 197 at 224/16), where cuDNN's fused attention has no backward pass and Keras
    would try it in every block, log the error and fall back; this asks for XLA's directly.
    """
    if keras.config.backend() == "jax" and training and length % 2 and _jax_platform() in ("gpu", "cuda"):
        return False
    return None


@functools.cache
def _jax_platform():
    """``"cpu"``, ``"gpu"`` or ``"tpu"``: where JAX computes."""
    return keras.distribution.list_devices()[0].split(":")[0].lower()


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
    """Scaled dot-product self-attention over all tokens.

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
        relative_position_grid: ``(rows, cols)`` of the patch grid for a learned bias on the
            attention logits by the two tokens' relative position (BEiT's; weight
            ``relative_position_bias``, one value per head and offset, read through
            ``relative_position_index``; the tokens must be a class token then that grid);
            None for none.
        rope_interleaved: the rotary table's channel pairs are neighbours (``rotate``'s
            ``interleaved``; EVA-02's), not the two halves (DINOv3's).
        output_norm: a norm of this kind (``"layernorm"``, ``"rmsnorm"``) on the heads'
            output before the output projection (sublayer ``norm``; EVA-02 CLIP's and
            BEiT-3's, timm's ``scale_attn_inner`` / ``scale_attn_norm``); None for none.
        output_norm_epsilon: its epsilon, and the query/key norms'.
        num_kv_heads: key and value heads, each shared by ``num_heads / num_kv_heads``
            query heads (grouped-query attention: ``qkv`` projects to ``(num_heads + 2
            num_kv_heads) head_dim`` columns, query | key | value); None: ``num_heads``.
        qk_norm: a norm of this kind on each head's queries and keys (sublayers ``q_norm``,
            ``k_norm``, over the head's channels), before the rotary turn; None for none.
        differential_lambda_init: differential attention (Ye et al., "Differential
            Transformer", 2024; timm's ``DiffAttention``) with this starting part of its
            weight (``differential_lambda_init(block index)``); None: the ordinary kind.
            Each head's queries and keys split in two halves, two softmax maps, the
            second subtracted with a learned weight ``exp(q1 . k1) - exp(q2 . k2) +
            lambda_init`` (weights ``lambda_q1``, ``lambda_k1``, ``lambda_q2``, ``lambda_k2``,
            one value per half-head channel); the heads' output RMS-normed (sublayer
            ``sub_norm``) and scaled by ``1 - lambda_init``. Always written out (two maps
            of another width than the values'); the attention weights returned are the
            difference.
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
        attention_dropout_rate=0.0,
        qkv_bias=True,
        out_bias=True,
        relative_position_grid=None,
        rope_interleaved=False,
        output_norm=None,
        output_norm_epsilon=1e-6,
        num_kv_heads=None,
        qk_norm=None,
        differential_lambda_init=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        lambda_init = differential_lambda_init
        self.differential_lambda_init = None if lambda_init is None else float(lambda_init)
        self.num_kv_heads = int(num_heads if num_kv_heads is None else num_kv_heads)
        if num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads {self.num_kv_heads} does not divide num_heads {num_heads}.")
        self.qk_norm = qk_norm
        self.rope_interleaved = bool(rope_interleaved)
        self.output_norm = output_norm
        self.output_norm_epsilon = float(output_norm_epsilon)
        grid = relative_position_grid
        self.relative_position_grid = None if grid is None else tuple(int(side) for side in grid)
        self.out_bias = bool(out_bias)
        self.num_heads = int(num_heads)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.qkv_bias = bool(qkv_bias)

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(f"{self.name}: width {width} is not divisible by num_heads {self.num_heads}.")
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
        if self.differential_lambda_init is not None:
            self._build_differential()
        self.attention_dropout = keras.layers.Dropout(
            self.attention_dropout_rate, name="attention_dropout", dtype=sublayer_policy(self, "attention_dropout")
        )
        # Built although it has no weights: see `call_inline`.
        self.attention_dropout.build((None, self.num_heads, input_shape[1], input_shape[1]))
        self._relative_index = None
        if self.relative_position_grid is not None:
            self._relative_index = relative_position_index(self.relative_position_grid)
            self.relative_position_bias = self.add_weight(
                name="relative_position_bias",
                shape=(int(self._relative_index.max()) + 1, self.num_heads),
                initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            )

    def _build_differential(self):
        if self.head_dim % 2 or self.num_kv_heads != self.num_heads or self.qk_norm or self.relative_position_grid:
            raise ValueError(
                f"{self.name}: differential attention takes an even head width and no grouped heads, query/key "
                f"norm or relative position bias; got head width {self.head_dim}, num_kv_heads {self.num_kv_heads}, "
                f"qk_norm {self.qk_norm!r}, relative_position_grid {self.relative_position_grid}."
            )
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, deferrable_weight(
                self, name=name, shape=(self.head_dim // 2,), dtype="float32", autocast=False,
                initializer=keras.initializers.RandomNormal(stddev=0.1),
            ))  # fmt: skip
        # timm's RmsNorm, epsilon fixed at 1e-5 whatever the model's norms take.
        self.sub_norm = deferrable(make_norm("rmsnorm", 1e-5, name="sub_norm", dtype=sublayer_policy(self, "sub_norm")))
        self.sub_norm.build((None, self.head_dim))

    def call(self, tokens, return_attention_scores=False, training=None, as_rows=False, rope=None):
        length, width = ops.shape(tokens)[1], tokens.shape[2]  # length: a tensor where the graph has none
        qkv = self._qkv(tokens, length, width)
        if rope is not None or self.q_norm is not None or self.num_kv_heads != self.num_heads:
            qkv = self._per_head(qkv, rope)
        dropout = bool(training) and self.attention_dropout_rate > 0
        if self.differential_lambda_init is not None:
            out, weights = self._differential_attention(qkv, training)
        elif use_fused_attention(needs_weights=return_attention_scores or dropout):
            out, weights = self._fused_attention(qkv, training), None
        else:
            out, weights = self._explicit_attention(qkv, training)
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

    def _logit_bias(self, dtype):
        """The relative position bias, ``(1, heads, tokens, tokens)``; None without one."""
        if self._relative_index is None:
            return None
        length = self._relative_index.shape[0]
        table = ops.take(ops.cast(self.relative_position_bias, dtype), self._relative_index.reshape(-1), axis=0)
        return ops.expand_dims(ops.transpose(ops.reshape(table, (length, length, self.num_heads)), (2, 0, 1)), 0)

    def _fused_attention(self, qkv, training):
        # Unstacked, not sliced: the gradient of an unstack is one stack, where three
        # slices each write a zero-filled gradient of the whole qkv tensor, then summed.
        query, key, value = ops.unstack(qkv, 3, axis=2)  # (batch, length, heads, dim)
        flash = _flash_attention(query.shape[1], training)
        bias = self._logit_bias(query.dtype)
        if bias is not None:
            return ops.dot_product_attention(query, key, value, bias=bias, flash_attention=False)
        return ops.dot_product_attention(query, key, value, flash_attention=flash)

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
        bias = self._logit_bias("float32")
        if bias is not None:
            logits = logits + bias
        weights = ops.cast(ops.softmax(logits, axis=-1), query.dtype)
        dropped = call_inline(self.attention_dropout, weights, training=training)
        return ops.transpose(ops.matmul(dropped, value), (0, 2, 1, 3)), weights

    def _differential_attention(self, qkv, training):
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
            + self.differential_lambda_init
        )
        weights = maps[:, :, 0] - weight * maps[:, :, 1]  # (batch, heads, length, length)
        weights = ops.cast(weights, qkv.dtype)
        heads = call_inline(self.sub_norm, ops.matmul(weights, value)) * (1.0 - self.differential_lambda_init)
        return ops.transpose(heads, (0, 2, 1, 3)), weights

    def get_config(self):
        return composite_config(self, super().get_config())
