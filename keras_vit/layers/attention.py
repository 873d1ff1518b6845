"""Multi-head self-attention with one fused query/key/value projection."""

import functools
import math

import keras
from keras import ops

from keras_vit import tensorflow_graph, torch_eager
from keras_vit.layers.dense import Dense
from keras_vit.layers.inline import call_inline, composite_config, sublayer_policy


def _fused_attention_pays():
    """True where the backend's fused attention beats the written-out one: PyTorch (its
    ``scaled_dot_product_attention``) and JAX on an accelerator (cuDNN, TPU kernels).

    On TensorFlow ``dot_product_attention`` is two ``tf.einsum`` calls, which oneDNN runs
    as a slower ``_MklEinsum``, with the scale applied to the (heads x tokens x tokens)
    logits instead of the 3.5x smaller query (ViT-B/16, batch 32, inference: 2-3.5%
    faster written out, ViT-Ti/16 batch 1 on a par or faster). On a CPU, JAX's is XLA's
    einsums over (batch, tokens, heads, dim), whose layouts cost transposes that the
    written-out heads-first form does once: ViT-Ti/16 at batch 32 1.26x faster in
    inference and 1.18x in training (float32; 1.15x and 1.04x in bfloat16), ViT-B/16
    1.14x, and batch 1 on a par.
    """
    backend = keras.config.backend()
    return backend == "torch" or (backend == "jax" and _jax_platform() != "cpu")


def _flash_attention(length, training):
    """``keras.ops.dot_product_attention``'s ``flash_attention``: None (Keras chooses), or
    False on JAX on a GPU in training at an odd token count (a class token and a square
    grid: 197 at 224/16).

    There cuDNN's fused attention has no backward pass (JAX 0.11.2 with cuDNN 9.19 on an
    H100: "Unsupported sequence length Q 197, KV 197"; 196 and 256 tokens take it forward
    and backward). Keras would try it in every block, log the error with its traceback,
    and run XLA's attention; this asks for XLA's directly. Inference keeps cuDNN's.
    """
    if keras.config.backend() == "jax" and training and length % 2 and _jax_platform() in ("gpu", "cuda"):
        return False
    return None


@functools.cache
def _jax_platform():
    """``"cpu"``, ``"gpu"`` or ``"tpu"``: where JAX computes."""
    return keras.distribution.list_devices()[0].split(":")[0].lower()


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Scaled dot-product self-attention over all tokens.

    Query, key and value come from one ``(width, 3 * width)`` matmul (columns ordered
    query | key | value, heads contiguous inside each): one large matmul is faster than
    three, and it is timm's ``qkv`` layout transposed. When no attention weights are asked
    for and no attention dropout is active, the fused ``keras.ops.dot_product_attention``
    runs (flash attention where the backend has it), except on TensorFlow and on JAX on a
    CPU, where the written-out form is faster (see ``_fused_attention_pays``; on a GPU
    the benchmark's ``attention`` column shows which kernel runs, and ``_flash_attention``
    where JAX's cannot). TensorFlow's float32 inference graphs on a oneDNN CPU compute the
    ``qkv`` product heads first as one batched matmul where there are enough token rows
    (see ``tensorflow_graph.heads_first_projection``).

    The two projections are Keras ``Dense`` layers (``qkv`` and ``out``; see
    ``keras_vit.layers.Dense``), so
    ``model.quantize("int8" | "float8" | "int4")`` quantizes them, and the quantized
    policies are saved with the layer (see ``dtype_policy_config``).

    Args:
        num_heads: attention heads; must divide the token width.
        attention_dropout_rate: dropout on the attention weights (the paper uses 0).
        qkv_bias: add a bias to the query, key and value projections (the paper's and
            timm's default; some timm models have none).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Call with ``as_rows=True`` for the output as the ``(batch * tokens, width)`` rows that the
    output projection computes, as ``EncoderBlock`` adds them to its residual stream.

    Example:
    >>> import numpy as np
    >>> layer = MultiHeadSelfAttention(num_heads=2)
    >>> out, weights = layer(np.zeros((1, 5, 8), "float32"), return_attention_scores=True)
    >>> tuple(out.shape), tuple(weights.shape)
    ((1, 5, 8), (1, 2, 5, 5))
    """

    def __init__(self, num_heads, attention_dropout_rate=0.0, qkv_bias=True, **kwargs):
        super().__init__(**kwargs)
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
        self.qkv = Dense(3 * width, use_bias=self.qkv_bias, name="qkv", dtype=sublayer_policy(self, "qkv"))
        self.qkv.build(input_shape)
        self.out = Dense(width, name="out", dtype=sublayer_policy(self, "out"))
        self.out.build(input_shape)
        self.attention_dropout = keras.layers.Dropout(
            self.attention_dropout_rate, name="attention_dropout", dtype=sublayer_policy(self, "attention_dropout")
        )
        # Built although it has no weights: see `call_inline`.
        self.attention_dropout.build((None, self.num_heads, input_shape[1], input_shape[1]))

    def call(self, tokens, return_attention_scores=False, training=None, as_rows=False):
        length, width = ops.shape(tokens)[1], tokens.shape[2]  # length: a tensor where the graph has none
        weights = None

        def attend():  # without the weights, from the 2-D qkv product
            return self._attention(self._qkv(tokens, length, width), training)

        if return_attention_scores or (training and self.attention_dropout_rate > 0):
            out, weights = self._explicit_attention(self._qkv(tokens, length, width), training)
        elif tensorflow_graph.projects_heads_first(self.qkv):
            out = tensorflow_graph.where_heads_first_pays(tokens, lambda: self._heads_first_attention(tokens), attend)
        else:
            out = attend()
        out = self._project_out(out, length, width, as_rows)
        return (out, weights) if return_attention_scores else out

    @property
    def _query_scale(self):
        return 1.0 / self.head_dim**0.5

    def _qkv(self, tokens, length, width):
        # The projections run on 2-D token rows, where TensorFlow's graph optimizer fuses a
        # matmul with its bias (see MlpBlock). (batch, length, 3, heads, dim)
        rows = ops.reshape(tokens, (-1, width))
        return ops.reshape(call_inline(self.qkv, rows), (-1, length, 3, self.num_heads, self.head_dim))

    def _attention(self, qkv, training):
        # Without the weights: the fused op where it is the faster one.
        if not _fused_attention_pays():
            return self._explicit_attention(qkv, training)[0]
        out = torch_eager.attention(qkv) if keras.config.backend() == "torch" else None
        if out is None:
            # Unstacked, not sliced: the gradient of an unstack is one stack, where three
            # slices each write a zero-filled gradient of the whole qkv tensor, then summed.
            query, key, value = ops.unstack(qkv, 3, axis=2)  # (batch, length, heads, dim)
            flash = _flash_attention(query.shape[1], training)
            out = ops.dot_product_attention(query, key, value, flash_attention=flash)
        return out

    def _project_out(self, heads, length, width, as_rows):
        # heads: (batch, length, heads, dim)
        out = call_inline(self.out, ops.reshape(heads, (-1, width)))
        return out if as_rows else ops.reshape(out, (-1, length, width))

    def _heads_first_attention(self, tokens):
        # TensorFlow's inference graphs on a oneDNN CPU: query, key and value come out of
        # one batched matmul already heads first, (heads, batch, length, dim), with the
        # query scaled (see `tensorflow_graph.heads_first_projection`); no transpose of the
        # qkv product and no multiply. ViT-B/16 at batch 32: 1.023x as fast (0.98-1.04).
        with keras.name_scope(self.qkv.name):  # the layer's own scope, as its call would open
            query, key, value = tensorflow_graph.heads_first_projection(
                tokens, self.qkv.kernel, self.qkv.bias, self.num_heads, self._query_scale
            )
        weights = ops.softmax(ops.matmul(query, ops.swapaxes(key, -1, -2)), axis=-1)
        return ops.transpose(ops.matmul(weights, value), (1, 2, 0, 3))

    def _explicit_attention(self, qkv, training):
        # Written out so that the weights can be returned and dropped out. Heads go first
        # in one transpose of the whole qkv tensor, and both products are batched matmuls:
        # einsums over (batch, length, heads, dim) cost TensorFlow a transpose of each
        # operand and of the result, ops that batch-1 inference pays for (ViT-Ti/16 6% faster).
        query, key, value = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), 3, axis=0)  # (batch, heads, length, dim)
        key_t = ops.swapaxes(key, -1, -2)
        scale = self._query_scale
        if keras.backend.standardize_dtype(query.dtype) == "float32" or math.frexp(scale)[0] == 0.5:
            # On the query, 3.5x smaller than the logits, where that rounds no more than
            # scaling the logits: in float32, or by a power of two (head_dim 64: 1/8).
            logits = ops.cast(ops.matmul(query * ops.cast(scale, query.dtype), key_t), "float32")
        else:
            logits = ops.cast(ops.matmul(query, key_t), "float32") * scale
        weights = ops.cast(ops.softmax(logits, axis=-1), query.dtype)
        dropped = call_inline(self.attention_dropout, weights, training=training)
        return ops.transpose(ops.matmul(dropped, value), (0, 2, 1, 3)), weights

    def get_config(self):
        return composite_config(self, super().get_config())
