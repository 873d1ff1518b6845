"""Keras' Dense under keras-vit's name, so that saved models and quantization keep working."""

import keras

from keras_vit import internals


@keras.saving.register_keras_serializable(package="keras_vit")
class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` (same weights, options, config and numbers) that
    ``model.quantize(...)`` quantizes as Keras' own.

    Models saved by earlier keras-vit versions name this class, so it stays registered.

    Examples:
        >>> import numpy as np
        >>> ours, keras_own = Dense(4, activation="gelu"), keras.layers.Dense(4, activation="gelu")
        >>> x = np.random.default_rng(0).standard_normal((5, 3)).astype("float32")
        >>> ours.build(x.shape); keras_own.build(x.shape); keras_own.set_weights(ours.get_weights())
        >>> bool(np.allclose(keras.ops.convert_to_numpy(ours(x)), keras.ops.convert_to_numpy(keras_own(x)), atol=1e-6))
        True
    """

    def quantize(self, mode=None, type_check=True, **kwargs):
        # Keras quantizes its own Dense class only, since a subclass may compute something
        # else; this one computes Keras' product, and quantized, runs Keras' quantized call.
        if type_check and type(self) is not Dense:
            raise internals.not_implemented_error(self, self.quantize)
        super().quantize(mode, type_check=False, **kwargs)
