"""The seam between the layers and TensorFlow, for its graphs on a oneDNN CPU only.

The layers are written in ``keras.ops``. On TensorFlow without XLA (Keras' default on a
CPU) Grappler's remapper rewrites a few known subgraphs into single oneDNN kernels, and
its patterns are written in TensorFlow ops that ``keras.ops`` does not emit. Those the
layers use are here, and nothing else in the layers imports TensorFlow:

- ``layer_norm``: a last-axis LayerNorm as the subgraph the remapper turns into one
  ``_MklLayerNorm`` kernel (see ``layers.LayerNorm``);
- ``heads_first_projection``: attention's query, key and value projection, its bias and
  the split into heads as one ``_MklFusedBatchMatMulV2`` kernel, where that pays
  (``where_heads_first_pays``; see ``layers.MultiHeadSelfAttention``);
- ``fuses_activation``: whether the remapper fuses a ``Dense``'s activation into its
  matmul, which decides the GELU's precision (see ``layers.activations``);
- ``portable``: a scope in which the layers keep Keras' own ops, for graphs that leave
  this TensorFlow (SavedModel, LiteRT, ONNX: see ``export.serving``).
"""

import functools

import keras

from keras_vit.scoped_flag import ScopedFlag

_PORTABLE = ScopedFlag()
_HEADS_FIRST_ROWS = 4  # token rows per unit of width from which `heads_first_projection` pays


def portable():
    """A ``with`` block inside which ``fuses_layer_norm`` is False: graphs traced there
    hold Keras' own ops.

    An exported graph runs where this remapper may not (TensorFlow without oneDNN, a GPU,
    LiteRT's and ONNX's converters, which know no training-mode batch norm).
    """
    return _PORTABLE.on()


@functools.cache
def _tf():
    import tensorflow as tf

    return tf


@functools.cache
def _onednn_cpu():
    """True where TensorFlow runs oneDNN and has no GPU: where the remapper's pattern is
    the one that runs. On a GPU the subgraph would stay a batch norm over every token row.
    TensorFlow answers this only in a private module: where that is gone, False (Keras'
    ops, never a slower graph)."""
    tf = _tf()
    try:
        from tensorflow.python.util import _pywrap_util_port

        onednn = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        onednn = False
    return onednn and not tf.config.list_logical_devices("GPU")


def _remapper_runs():
    """Whether the graph being built is one that Grappler's oneDNN remapper rewrites:
    inside a ``tf.function`` on a oneDNN CPU, outside ``portable``."""
    return not _PORTABLE and _tf().inside_function() and _onednn_cpu()


def _records_gradient():
    """Whether a gradient tape records the ops being built. TensorFlow answers this only
    in a private module: where that is gone, False."""
    try:
        from tensorflow.python.eager import record

        return bool(record.could_possibly_record())
    except (ImportError, AttributeError):
        return False


def fuses_activation():
    """Whether a ``Dense``'s activation built now fuses into its matmul as a oneDNN post-op.

    The remapper fuses a 2-D matmul, its bias add and a known activation (Relu, Tanh,
    both GELU forms as ``tf.nn.gelu`` writes them, ...) into one kernel, in an inference
    graph: where a gradient is recorded, the bias add's output is kept for the
    gradient and the remapper leaves the subgraph as it is.
    """
    return _remapper_runs() and not _records_gradient()


def projects_heads_first(qkv):
    """Whether ``heads_first_projection`` runs for the ``Dense`` layer ``qkv`` now: on
    TensorFlow, in an inference graph on a oneDNN CPU (``fuses_activation``), in float32,
    for Keras' own unquantized, LoRA-free product (the layer's call is bypassed)."""
    if keras.config.backend() != "tensorflow" or qkv.quantization_mode is not None or qkv.lora_enabled:
        return False
    return qkv.compute_dtype == "float32" and qkv.kernel.dtype == "float32" and fuses_activation()


def where_heads_first_pays(tokens, heads_first, otherwise):
    """``heads_first()`` where the qkv product has at least ``_HEADS_FIRST_ROWS`` times as
    many token rows as ``tokens`` has width, else ``otherwise()``: decided as the graph is
    traced where its batch size is known, else by a ``tf.cond`` at run time (Grappler
    fuses inside both branches).

    ``heads_first_projection`` rearranges the kernel on every call (width x 3 width values),
    where the transpose it saves is the product's (rows x 3 width): at few rows the first
    costs more. ViT-B/16 (width 768), one process taking turns: batch 1 (197 rows) 0.95x,
    batch 4 0.99x, batch 8 0.99x, batch 32 (6304 rows) 1.023x; ViT-Ti/16 (width 192) batch
    8 1.05x.
    """
    tf = _tf()
    width = tokens.shape[-1]
    rows = None if None in tokens.shape[:2] else tokens.shape[0] * tokens.shape[1]
    if rows is not None:
        return heads_first() if rows >= _HEADS_FIRST_ROWS * width else otherwise()
    shape = tf.shape(tokens)
    return tf.cond(shape[0] * shape[1] >= _HEADS_FIRST_ROWS * width, heads_first, otherwise)


def heads_first_projection(tokens, kernel, bias, heads, query_scale):
    """Query, key and value of ``tokens`` ``(batch, length, width)``, each
    ``(heads, batch, length, dim)``, the query times ``query_scale``: ``tokens @ kernel +
    bias`` (columns query | key | value, heads contiguous inside each) split into heads.

    As a 2-D matmul, the product comes out token-major, and the attention's batched
    matmuls want heads first: a transpose of the whole product (ViT-B/16 at batch 32: 58
    MB, 5-6 ms a block). Here the kernel is arranged per head, ``(3 * heads, 1, width,
    dim)``, and one batched matmul writes each head's rows where the attention reads
    them. The bias rides along as the remapper's ``BatchMatMulV2 * scalar + addend``
    fusion, a oneDNN post-op (its addend must have a unit second axis: ``(3 * heads, 1,
    1, dim)``; the scalar is a 1 that constant folding cannot remove). The query's scale
    goes into its kernel and bias, 3.5x smaller than the query (exact for a power of
    two, as head_dim 64's 1/8). One block of ViT-B/16 at batch 32 on an Intel Xeon: the
    batched matmul with its bias 54 ms and the kernel's arrangement 3, against 61 for
    the fused 2-D matmul, 5.8 for the transpose and 1.8 for the query's multiply.
    """
    tf = _tf()
    width = kernel.shape[0]
    dim = kernel.shape[1] // (3 * heads)
    scales = tf.repeat(tf.constant([query_scale, 1.0, 1.0], kernel.dtype), heads)[:, None, None]
    # A 3-D transpose: oneDNN ran the 4-D one, (width, 3, heads, dim) to heads first, at a
    # seventh of the speed (12.7 against 1.7 ms at ViT-B/16).
    per_head = tf.transpose(tf.reshape(kernel, (width, 3 * heads, dim)), (1, 0, 2)) * scales
    projected = tf.matmul(tf.expand_dims(tokens, 0), per_head[:, None])  # (3 * heads, batch, length, dim)
    if bias is not None:
        one = tf.raw_ops.PlaceholderWithDefault(input=tf.constant(1.0, kernel.dtype), shape=[])
        projected = projected * one + (tf.reshape(bias, (3 * heads, 1, dim)) * scales)[:, None]
    # One product, split after: split kernels (views into one buffer) ran oneDNN's batched
    # matmul at half the speed, and a split bias as the addend 700 times slower.
    return tf.split(projected, 3)


def fuses_layer_norm(inputs):
    """Whether ``layer_norm`` becomes one kernel for ``inputs``: inside a ``tf.function``
    on a oneDNN CPU, in float32 (``LayerNorm`` computes in it), of rank 2 or 3 (the
    kernel's ranks), and outside ``portable``."""
    return _remapper_runs() and inputs.dtype == _tf().float32 and len(inputs.shape) in (2, 3)


def layer_norm(x, gamma, beta, epsilon):
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the last axis, written as
    TensorFlow's remapper expects it: Keras 2's form, a training-mode batch norm over the
    token rows as channels (``[1, rows, width, 1]``, NCHW, unit scale and zero offset from
    ``Fill``), then ``* gamma + beta``. The remapper replaces the whole subgraph with one
    ``_MklLayerNorm`` kernel: 4.0 against 8.5 ms for the centred form on ViT-B/16's
    (32, 197, 768) token rows. Only for ``fuses_layer_norm`` inputs: unfused, this batch norm is slower.

    The pattern needs ``Fill`` nodes. Where the shape is static, constant folding would
    turn them into constants first, so the row count passes through a
    ``PlaceholderWithDefault``, which constant folding leaves alone (in a function nothing
    can feed it: it is the row count). A graph that is differentiated keeps the batch
    norm's intermediates, so the remapper leaves it, and the batch norm's own gradient runs.
    """
    tf = _tf()
    # The remapper fuses only where the input's shape equals the output's. A reshape into
    # x (the encoder block's tokens from its 2-D rows) would merge with the one below,
    # and the input would become the rows: this node (it forwards x) keeps x as it is.
    x = tf.raw_ops.PlaceholderWithDefault(input=x, shape=x.shape)
    shape = tf.shape(x)
    rows = tf.raw_ops.PlaceholderWithDefault(input=tf.reduce_prod(shape[:-1], keepdims=True), shape=[1])
    rows_first = tf.reshape(x, tf.concat([[1], rows, shape[-1:], [1]], axis=0))
    normalized, _, _ = tf.compat.v1.nn.fused_batch_norm(
        rows_first, tf.fill(rows, 1.0), tf.fill(rows, 0.0), epsilon=epsilon, data_format="NCHW"
    )
    return tf.reshape(normalized, shape) * gamma + beta
