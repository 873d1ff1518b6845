"""Stochastic depth: dropping a whole residual branch per example."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Zeroes a residual branch for a random subset of examples while training.

    Kept examples are scaled by ``1 / (1 - rate)`` so the expectation is unchanged
    (Huang et al. 2016, as timm's ``DropPath``). Identity at inference.

    Args:
        rate: probability of dropping an example's branch, in ``[0, 1)``.
        seed: seed of the layer's ``keras.random.SeedGenerator`` (None: drawn from the
            global seed, see ``keras.utils.set_random_seed``).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import keras, numpy as np
        >>> x = np.ones((4, 3, 2), "float32")
        >>> bool((keras.ops.convert_to_numpy(DropPath(0.5)(x, training=False)) == x).all())
        True
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"drop path rate must be in [0, 1), got {rate}.")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype) < keep
        return x * ops.cast(mask, x.dtype) / ops.cast(keep, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config
