"""Keras' LayerNormalization under keras-vit's name, kept for saved models."""

import keras


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
