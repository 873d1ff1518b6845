"""Activations the layers name in their configs: the MLP's GELU forms.

The three forms part in the third decimal at 1:

>>> import numpy as np
>>> [round(float(f(np.float32(1.0))), 4) for f in (gelu_tanh, gelu_erf, quick_gelu)]
[0.8412, 0.8413, 0.8458]
"""

import keras
from keras import ops

from keras_vit.vocabulary import MLP_ACTIVATIONS


def _in_float32(x):
    """Whether a half-precision GELU computes in float32 and rounds once: on JAX and
    TensorFlow, whose compilers run the element-wise half-precision op slowly; PyTorch's
    own kernel already computes in float32 inside."""
    if keras.backend.standardize_dtype(x.dtype) not in ("bfloat16", "float16"):
        return False
    return keras.config.backend() in ("jax", "tensorflow")


def _gelu(x, approximate):
    if _in_float32(x):
        return ops.cast(ops.gelu(ops.cast(x, "float32"), approximate=approximate), x.dtype)
    return ops.gelu(x, approximate=approximate)


@keras.saving.register_keras_serializable(package="keras_vit")
def gelu_tanh(x):
    """GELU's tanh approximation, the form of the original JAX code (flax's ``nn.gelu``)."""
    return _gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="keras_vit")
def gelu_erf(x):
    """The exact GELU, ``x * Phi(x)`` with the normal CDF by erf: timm's and HF's form."""
    return _gelu(x, approximate=False)


@keras.saving.register_keras_serializable(package="keras_vit")
def quick_gelu(x):
    """OpenAI CLIP's sigmoid approximation of GELU, ``x * sigmoid(1.702 x)``."""
    return x * ops.sigmoid(ops.cast(1.702, x.dtype) * x)


def mlp_activation(name, gelu_approximate):
    """The MLP's activation function for ``ViTSpec.mlp_activation`` and ``gelu_approximate``.

    >>> mlp_activation("gelu", False).__name__, mlp_activation("quick_gelu", True).__name__
    ('gelu_erf', 'quick_gelu')
    """
    if name not in MLP_ACTIVATIONS:
        raise ValueError(f"mlp_activation must be one of {MLP_ACTIVATIONS}, got {name!r}.")
    if name == "quick_gelu":
        return quick_gelu
    if name == "silu":
        return keras.activations.silu
    return gelu_tanh if gelu_approximate else gelu_erf
