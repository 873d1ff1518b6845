"""Weight-standardised convolution (BiT), with TF "SAME" padding."""

import keras
from keras import ops

from keras_vit import checks
from keras_vit.layer_rules import check_std_conv_form
from keras_vit.layers.initializers import deferrable_weight
from keras_vit.layers.padding import check_feature_map, conv_output_size, pad_same


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Layer):
    """2D convolution whose kernel is standardised per output channel before every use.

    The statistics are over ``(kh, kw, in)``, with the biased variance: ``"var_eps"``
    computes ``(w - mean) / sqrt(var + epsilon)`` (timm's ``StdConv2dSame``),
    ``"std_eps"`` ``(w - mean) / (std + epsilon)`` (the original BiT code, epsilon 1e-5).
    ``padding="same"`` is TF "SAME" (extra pixel bottom/right), ``"valid"`` none.

    Args:
        filters: output channels.
        kernel_size, strides: an int or a pair ``(h, w)``.
        padding: ``"same"`` or ``"valid"``.
        epsilon: standardisation epsilon (timm's hybrids: 1e-8).
        std_conv_form: ``"var_eps"`` or ``"std_eps"``, see above.
        use_bias: add a bias (BiT's convs have none).
        kernel_initializer, bias_initializer: initialisers of the HWIO kernel and the bias.

    >>> import numpy as np
    >>> conv = StdConv2D(8, 7, strides=2, name="conv_root")
    >>> tuple(conv(np.zeros((1, 50, 50, 3), "float32")).shape)
    (1, 25, 25, 8)
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        *,
        padding="same",
        epsilon=1e-8,
        std_conv_form="var_eps",
        use_bias=False,
        kernel_initializer="he_normal",
        bias_initializer="zeros",
        **kwargs,
    ):
        # The kernel is standardised in its own (float32) dtype and cast afterwards, so no
        # autocasting (the variables opt out too, so an owner's autocast scope skips them).
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        if int(filters) < 1:
            raise ValueError(f"`filters` must be >= 1. Received: filters={filters!r}")
        self.filters = int(filters)
        self.kernel_size = checks.pair(kernel_size, "kernel_size")
        self.strides = checks.pair(strides, "strides")
        self.padding = str(padding).lower()
        if self.padding not in ("same", "valid"):
            raise ValueError(f"`padding` must be 'same' (TF style) or 'valid'. Received: padding={padding!r}")
        self.epsilon = float(epsilon)
        self.std_conv_form = check_std_conv_form(std_conv_form)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        check_feature_map(input_shape, f"StdConv2D '{self.name}'")
        check_feature_map(
            self.compute_output_shape(input_shape),
            f"StdConv2D '{self.name}'",
            f"the output (kernel {self.kernel_size}, strides {self.strides}, padding '{self.padding}')",
        )
        shape = self.kernel_size + (input_shape[-1], self.filters)
        self.kernel = deferrable_weight(
            self, name="kernel", shape=shape, initializer=self.kernel_initializer, autocast=False
        )
        self.bias = None
        if self.use_bias:
            self.bias = deferrable_weight(
                self, name="bias", shape=(self.filters,), initializer=self.bias_initializer, autocast=False
            )

    def standardized_kernel(self):
        """The HWIO kernel that is actually convolved with."""
        axes = (0, 1, 2)
        w = ops.convert_to_tensor(self.kernel)
        w = w - ops.mean(w, axis=axes, keepdims=True)
        # A second centring removes the rounding error of the first mean, which matters when
        # a channel's mean is large next to its spread (it only touches the kernel: cheap).
        w = w - ops.mean(w, axis=axes, keepdims=True)
        var = ops.mean(ops.square(w), axis=axes, keepdims=True)  # biased, as both upstreams
        if self.std_conv_form == "var_eps":
            return w * ops.rsqrt(var + self.epsilon)
        return w / (ops.sqrt(var) + self.epsilon)

    def call(self, inputs):
        kernel = ops.cast(self.standardized_kernel(), self.compute_dtype)
        x = ops.cast(inputs, self.compute_dtype)
        padding = self.padding
        if padding == "same":
            x, padding = pad_same(x, self.kernel_size, self.strides)
        x = ops.conv(x, kernel, strides=self.strides, padding=padding, data_format="channels_last")
        return x if self.bias is None else x + ops.cast(self.bias, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        sides = [
            conv_output_size(size, k, s, self.padding)
            for size, k, s in zip(input_shape[1:3], self.kernel_size, self.strides)
        ]
        return (input_shape[0], *sides, self.filters)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "epsilon": self.epsilon,
            "std_conv_form": self.std_conv_form,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
