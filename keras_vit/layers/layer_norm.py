"""The ViT's norms: Keras' LayerNormalization under keras-vit's name (kept for saved
models), or Keras' RMSNormalization, by the spec's ``norm_type``."""

import keras

from keras_vit.vocabulary import NORM_TYPES


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerNorm(keras.layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` over the last axis (same weights, options,
    config and numbers). Models saved by earlier keras-vit versions name this class, so
    it stays registered. Half-precision inputs are normalised in float32, as Keras does.

    Examples:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype("float32")
        >>> ours, keras_own = LayerNorm(epsilon=1e-6), keras.layers.LayerNormalization(epsilon=1e-6)
        >>> bool(np.allclose(keras.ops.convert_to_numpy(ours(x)), keras.ops.convert_to_numpy(keras_own(x)), atol=1e-6))
        True
    """


def make_norm(norm_type, epsilon, **kwargs):
    """A ``LayerNorm`` (``"layernorm"``: scale and offset) or Keras' ``RMSNormalization``
    (``"rmsnorm"``: ``x / rms(x) * scale``, AIMv2's) over the last axis.

    >>> type(make_norm("rmsnorm", 1e-5)).__name__, make_norm("layernorm", 1e-6).epsilon
    ('RMSNormalization', 1e-06)
    """
    if norm_type not in NORM_TYPES:
        raise ValueError(f"norm_type must be one of {NORM_TYPES}, got {norm_type!r}.")
    if norm_type == "rmsnorm":
        return keras.layers.RMSNormalization(epsilon=epsilon, **kwargs)
    return LayerNorm(epsilon=epsilon, **kwargs)
