"""Cutting an image into non-overlapping patches and projecting each to a token."""

import keras
from keras import ops

from keras_vit.layers.arguments import arguments_config
from keras_vit.layers.initializers import deferrable_weight


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Linear projection of non-overlapping ``patch_size`` x ``patch_size`` patches.

    This is the paper's "patch + position embedding" first half: a convolution whose
    kernel and stride both equal the patch size, flattened to a token sequence. The
    kernel is kept in Keras' HWIO layout, which is also the original ``.npz`` layout.

    Args:
        hidden_size: width of each token.
        patch_size: side of a square patch, in pixels (or feature-map cells for hybrids).
        num_channels: channels the input must have; checked when the layer is built.
        flatten: return the tokens ``(batch, rows * cols, hidden_size)``, row-major; False
            keeps the ``(batch, rows, cols, hidden_size)`` map (a dynamic-size model reads
            the patch grid from it).
        use_bias: add a bias (CLIP's patch embedding has none).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Keras has no quantized convolution: ``model.quantize(...)`` leaves this layer in
    float (with a warning) and quantizes the rest.

    Examples:
        >>> import numpy as np
        >>> layer = PatchEmbedding(hidden_size=8, patch_size=4, num_channels=3)
        >>> tuple(layer(np.zeros((2, 16, 16, 3), "float32")).shape)
        (2, 16, 8)
    """

    def __init__(self, hidden_size, patch_size, num_channels=3, *, flatten=True, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.use_bias = bool(use_bias)
        self.hidden_size = int(hidden_size)
        self.patch_size = int(patch_size)
        self.num_channels = int(num_channels)
        self.flatten = bool(flatten)

    def _check_shape(self, input_shape):
        _, height, width, channels = input_shape
        if channels != self.num_channels:
            raise ValueError(
                f"{self.name}: expected images with {self.num_channels} channels "
                f"(NHWC), got input shape {tuple(input_shape)}."
            )
        for side, size in (("height", height), ("width", width)):
            if size is not None and size < self.patch_size:
                raise ValueError(
                    f"{self.name}: image {side} {size} is smaller than one {self.patch_size}-pixel patch "
                    f"(input shape {tuple(input_shape)})."
                )
            if size is not None and size % self.patch_size:
                raise ValueError(
                    f"{self.name}: image {side} must be divisible by the patch size "
                    f"{self.patch_size}, got {size} (input shape {tuple(input_shape)})."
                )

    def build(self, input_shape):
        self._check_shape(input_shape)
        self.kernel = deferrable_weight(
            self,
            name="kernel",
            shape=(self.patch_size, self.patch_size, self.num_channels, self.hidden_size),
            initializer="lecun_normal",
        )
        self.bias = None
        if self.use_bias:
            self.bias = deferrable_weight(self, name="bias", shape=(self.hidden_size,), initializer="zeros")

    def call(self, images):
        # Functional models do not enforce their input shape; say what is wrong here.
        self._check_shape(tuple(images.shape))
        x = ops.conv(images, self.kernel, strides=self.patch_size, padding="valid")
        if self.bias is not None:
            x = x + self.bias
        if not self.flatten:
            return x
        batch, grid_h, grid_w, _ = ops.shape(x)  # tensors where the graph does not know them
        # The batch read from the input, not inferred (-1): in a graph traced for one image
        # size, the patches of a larger image must not fold into extra images (LiteRT's
        # signature runner resizes its input tensor to whatever it is given); they fail here
        # or at the position embeddings instead.
        return ops.reshape(x, (batch, grid_h * grid_w, self.hidden_size))

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        grid = [None if size is None else size // self.patch_size for size in (height, width)]
        if not self.flatten:
            return (batch, *grid, self.hidden_size)
        return (batch, None if None in grid else grid[0] * grid[1], self.hidden_size)

    def get_config(self):
        return arguments_config(self, super().get_config())
