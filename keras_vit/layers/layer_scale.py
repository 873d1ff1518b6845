"""LayerScale: a residual branch multiplied per channel by learned weights."""

import keras
from keras import ops

from keras_vit.layers.initializers import deferrable_weight


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """``x * gamma`` over the last axis, ``gamma`` starting at ``init_value`` (Touvron et
    al., "Going deeper with Image Transformers"; timm's ``ls1`` / ``ls2``, DINOv2's and
    DeiT III's blocks).

    Args:
        init_value: the weights' starting value (timm's ``init_values``).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> layer = LayerScale(0.5)
        >>> keras.ops.convert_to_numpy(layer(np.ones((1, 2, 3), "float32")))[0, 0].tolist()
        [0.5, 0.5, 0.5]
    """

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.gamma = deferrable_weight(
            self, name="gamma", shape=(input_shape[-1],), initializer=keras.initializers.Constant(self.init_value)
        )

    def call(self, x):
        return x * ops.cast(self.gamma, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(init_value=self.init_value)
        return config
