"""Activations the layers name in their configs: the MLP's two GELU forms."""

import keras
from keras import ops

from keras_vit import tensorflow_graph


def _in_float32(x):
    """Whether a half-precision GELU computes in float32 and rounds once.

    Element-wise half-precision GELU is slow on both compilers that run it unfused: XLA's
    CPU code (ViT-B/16's fc1 output, 6304 x 3072 bfloat16, tanh form: 57 ms forward and
    backward against 21 in float32 with the casts, fused into the same loops), and
    TensorFlow's graph ops (Ti/16's fc1 output, 6304 x 768 bfloat16 on an Intel Xeon:
    forward 13.9 against 12.6 ms for the tanh form, 33.0 against 11.5 for erf; a whole
    Ti/16 training step 1.14x faster). TensorFlow keeps the bfloat16 op where its graph
    optimizer fuses it into the matmul as a oneDNN post-op, at inference
    (``tensorflow_graph.fuses_activation``), and PyTorch's own fused kernel runs.
    """
    if keras.backend.standardize_dtype(x.dtype) not in ("bfloat16", "float16"):
        return False
    backend = keras.config.backend()
    return backend == "jax" or (backend == "tensorflow" and not tensorflow_graph.fuses_activation())


def _gelu(x, approximate):
    if _in_float32(x):
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
