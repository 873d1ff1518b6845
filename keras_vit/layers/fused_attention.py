"""The one switch between attention's two forms, both in ``keras.ops``: the fused
``keras.ops.dot_product_attention`` (each backend's own kernel: PyTorch's
``scaled_dot_product_attention``, cuDNN or XLA's on JAX, flash attention where it runs) and
the written-out softmax of the scores, which can also return the weights and drop them
out. ``use_fused_attention`` is the one place that chooses between them, and
``KERAS_VIT_FUSED_ATTN`` (or ``set_fused_attention``) overrides it, as timm's
``TIMM_FUSED_ATTN`` does. Every attention kind (``keras_vit.layers.attention``) asks it.
"""

import functools
import os

import keras

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
