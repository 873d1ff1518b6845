"""Activations the layers name in their configs."""

import keras


@keras.saving.register_keras_serializable(package="keras_vit")
def gelu_tanh(x):
    """GELU's tanh approximation, the form of the original JAX code (flax's ``nn.gelu``).

    >>> import numpy as np
    >>> round(float(gelu_tanh(np.float32(1.0))), 4)
    0.8412
    """
    return keras.ops.gelu(x, approximate=True)
