"""The class token and the position embeddings added to the token sequence."""

import keras
import numpy as np
from keras import ops

POSITION_EMBEDDINGS = ("learned", "sincos2d")


def sincos_2d_position_embedding(grid_size, hidden_size, temperature=10_000.0):
    """Fixed 2D sine-cosine position embedding, shape ``(grid_h * grid_w, hidden_size)``.

    A quarter of the channels each for sin(x), cos(x), sin(y), cos(y) as in big_vision's
    ``posemb_sincos_2d`` (which is what "sincos2d" ViTs were trained with).

    >>> sincos_2d_position_embedding((2, 3), 8).shape
    (6, 8)
    """
    grid_h, grid_w = grid_size
    if hidden_size % 4:
        raise ValueError(f"sincos2d needs hidden_size divisible by 4, got {hidden_size}.")
    y, x = np.mgrid[:grid_h, :grid_w]
    omega = np.arange(hidden_size // 4) / (hidden_size // 4 - 1 or 1)
    omega = 1.0 / temperature**omega
    y = np.einsum("m,d->md", y.ravel(), omega)
    x = np.einsum("m,d->md", x.ravel(), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1).astype("float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends one learned token whose final state is the image representation.

    Takes only ``Layer`` arguments (``name``, ``dtype``, ...); its weight is ``token``,
    shape ``(1, 1, width)``.

    Example:
    >>> import numpy as np
    >>> tuple(ClassToken()(np.zeros((2, 4, 8), "float32")).shape)
    (2, 5, 8)
    """

    def build(self, input_shape):
        # Zeros, as the original code initialises it.
        self.token = self.add_weight(name="token", shape=(1, 1, input_shape[-1]), initializer="zeros")

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.broadcast_to(ops.cast(self.token, tokens.dtype), (batch, 1, tokens.shape[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def get_config(self):
        # Only Layer arguments; explicit, so a model that nests this one (a backbone inside
        # a segmenter) serialises it with its dtype policy.
        return super().get_config()

    def compute_output_shape(self, input_shape):
        batch, length, width = input_shape
        return (batch, None if length is None else length + 1, width)


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds a position embedding to ``num_prefix_tokens`` + grid tokens.

    Args:
        grid_size: ``(rows, cols)`` of the patch grid.
        num_prefix_tokens: tokens before the grid (1 with a class token, else 0).
        kind: ``"learned"`` (the paper's 1D table, one row per token, the class token
            included: shape ``(1, prefix + rows * cols, width)`` as in every checkpoint) or
            ``"sincos2d"`` (fixed, no weights; prefix tokens get no position).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Example:
    >>> import numpy as np
    >>> layer = PositionEmbedding(grid_size=(2, 2), num_prefix_tokens=1)
    >>> tuple(layer(np.zeros((3, 5, 8), "float32")).shape)
    (3, 5, 8)
    """

    def __init__(self, grid_size, num_prefix_tokens=1, kind="learned", **kwargs):
        super().__init__(**kwargs)
        if kind not in POSITION_EMBEDDINGS:
            raise ValueError(f"position embedding must be one of {POSITION_EMBEDDINGS}, got {kind!r}.")
        self.grid_size = tuple(int(s) for s in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.kind = kind

    @property
    def num_tokens(self):
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def build(self, input_shape):
        if input_shape[1] is not None and input_shape[1] != self.num_tokens:
            raise ValueError(
                f"{self.name}: expected {self.num_tokens} tokens ({self.num_prefix_tokens} prefix + "
                f"grid {self.grid_size}), got input shape {tuple(input_shape)}."
            )
        width = input_shape[-1]
        if self.kind == "learned":
            self.embedding = self.add_weight(
                name="embedding",
                shape=(1, self.num_tokens, width),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        else:
            table = sincos_2d_position_embedding(self.grid_size, width)
            table = np.concatenate([np.zeros((self.num_prefix_tokens, width), "float32"), table])
            # Fixed: kept as a constant, not a weight, so checkpoints carry nothing for it.
            self._fixed = table[None]

    def call(self, tokens):
        if tokens.shape[1] != self.num_tokens:
            raise ValueError(
                f"{self.name}: expected {self.num_tokens} tokens (a {self.grid_size} patch grid), got "
                f"{tokens.shape[1]}: the images are not the size the model was built for. Resize them, "
                "or build the model at their size (create_model(..., image_size=...)) and load the "
                "weights into it, which resamples the position embeddings."
            )
        table = self.embedding if self.kind == "learned" else self._fixed
        return tokens + ops.cast(table, tokens.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=self.grid_size, num_prefix_tokens=self.num_prefix_tokens, kind=self.kind)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchTokens(keras.layers.Layer):
    """Drops the prefix tokens (class token), and with ``grid_size`` lays the patch tokens
    out as a feature map: ``(batch, prefix + h*w, width)`` -> ``(batch, h, w, width)``.

    The patch tokens are row-major over the ``(h, w)`` grid, as the patch embedding
    flattens them.

    Args:
        num_prefix_tokens: tokens before the patch grid.
        grid_size: ``(h, w)`` to reshape to (NHWC); None keeps ``(batch, h*w, width)``.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Example:
    >>> import numpy as np
    >>> tuple(PatchTokens(1, grid_size=(2, 3))(np.zeros((4, 7, 8), "float32")).shape)
    (4, 2, 3, 8)
    """

    def __init__(self, num_prefix_tokens=1, grid_size=None, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.grid_size = None if grid_size is None else tuple(int(s) for s in grid_size)

    def call(self, tokens):
        patches = tokens[:, self.num_prefix_tokens :]
        if self.grid_size is None:
            return patches
        return ops.reshape(patches, (-1, *self.grid_size, tokens.shape[-1]))

    def compute_output_shape(self, input_shape):
        if self.grid_size is None:
            tokens = None if input_shape[1] is None else input_shape[1] - self.num_prefix_tokens
            return (input_shape[0], tokens, input_shape[-1])
        return (input_shape[0], *self.grid_size, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(num_prefix_tokens=self.num_prefix_tokens, grid_size=self.grid_size)
        return config
