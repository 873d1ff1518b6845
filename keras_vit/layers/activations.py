"""Activations the layers name in their configs: the MLP's two GELU forms."""

import keras
from keras import ops


def _gelu(x, approximate):
    if keras.config.backend() == "jax" and keras.backend.standardize_dtype(x.dtype) in ("bfloat16", "float16"):
        # XLA's CPU code is slow on GELU's half-precision form: at ViT-B/16's fc1 output
        # (6304 x 3072, bfloat16) the tanh form took 57 ms forward and backward, 21 in
        # float32 with the casts (fused into the same loops). The result rounds once.
        # TensorFlow keeps the plain op, which its graph optimizer fuses into the matmul.
        return ops.cast(ops.gelu(ops.cast(x, "float32"), approximate=approximate), x.dtype)
    return ops.gelu(x, approximate=approximate)


@keras.saving.register_keras_serializable(package="keras_vit")
def gelu_tanh(x):
    """GELU's tanh approximation, the form of the original JAX code (flax's ``nn.gelu``).

    >>> import numpy as np
    >>> round(float(gelu_tanh(np.float32(1.0))), 4)
    0.8412
    """
    return _gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="keras_vit")
def gelu_erf(x):
    """The exact GELU, ``x * Phi(x)`` with the normal CDF by erf: timm's and HF's form.

    >>> import numpy as np
    >>> round(float(gelu_erf(np.float32(1.0))), 4)
    0.8413
    """
    return _gelu(x, approximate=False)
