"""Keras' Dense, run as one kernel in eager PyTorch."""

import keras

from keras_vit import torch_eager


@keras.saving.register_keras_serializable(package="keras_vit")
class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` (same weights, options and config) whose matmul, bias and
    activation run as one kernel in eager PyTorch.

    Keras runs them as three kernels on every backend; TensorFlow's graph optimizer and
    XLA fuse them again, eager PyTorch does not. There this layer calls PyTorch's linear
    kernels instead (see ``keras_vit.torch_eager.linear``): without a gradient on a CPU,
    oneDNN's fused linear with the activation as its post-op where that is faster,
    otherwise ``F.linear``; it keeps its kernel in the memory order they read
    (``torch_eager.order_kernel``). The results differ from Keras' by float32 rounding (and in bfloat16
    are rounded once instead of three times). Quantized layers, TensorFlow, JAX and
    traced PyTorch graphs run Keras' own call, and ``model.quantize(...)`` quantizes this
    layer as Keras' own.

    Example:
    >>> import numpy as np
    >>> ours, keras_own = Dense(4, activation="gelu"), keras.layers.Dense(4, activation="gelu")
    >>> x = np.random.default_rng(0).standard_normal((5, 3)).astype("float32")
    >>> ours.build(x.shape); keras_own.build(x.shape); keras_own.set_weights(ours.get_weights())
    >>> bool(np.allclose(keras.ops.convert_to_numpy(ours(x)), keras.ops.convert_to_numpy(keras_own(x)), atol=1e-5))
    True
    """

    def call(self, inputs, training=None):
        # The backend first: eager PyTorch runs this check on every call.
        if keras.config.backend() == "torch":
            outputs = torch_eager.linear(inputs, self.kernel, self.bias, self.activation)
            if outputs is not None:
                return outputs
        return super().call(inputs, training=training)

    def quantize(self, mode=None, type_check=True, **kwargs):
        # Keras quantizes its own Dense class only, since a subclass may compute something
        # else; this one computes Keras' product, and quantized, runs Keras' quantized call.
        if type_check and type(self) is not Dense:
            raise self._not_implemented_error(self.quantize)
        super().quantize(mode, type_check=False, **kwargs)
