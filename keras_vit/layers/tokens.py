"""The class token and the position embeddings added to the token sequence."""

import keras
import numpy as np
from keras import ops

from keras_vit.layers.arguments import arguments_config
from keras_vit.layers.initializers import deferrable_weight
from keras_vit.resampling import axis_weights
from keras_vit.vocabulary import POSITION_TABLES

# Resamplings of a learned table to another grid: antialiased as torch's (= PIL's).
POSITION_INTERPOLATIONS = ("bicubic", "bilinear")


# The sine-cosine tables' two forms, by the spacing of their frequencies
# ``temperature ** -(i / d)`` over a quarter's ``i`` in 0..q-1: big_vision's ``d = q - 1``
# (the last frequency is 1 / temperature), MAE's ``d = q`` (its ``get_2d_sincos_pos_embed``).
SINCOS_FORMS = {"big_vision": -1, "mae": 0}


def sincos_2d_position_embedding(grid_size, hidden_size, temperature=10_000.0, xp=np, form="big_vision"):
    """Fixed 2D sine-cosine position embedding, shape ``(grid_h * grid_w, hidden_size)``.

    A quarter of the channels each for sin(x), cos(x), sin(y), cos(y) (x the column) as in
    big_vision's ``posemb_sincos_2d`` (which is what "sincos2d" ViTs were trained with) and
    MAE's table, which differ in the spacing of the frequencies (``form``: ``SINCOS_FORMS``).
    ``xp`` is numpy (computed in float64, returned in float32) or ``keras.ops`` for a grid
    known only at run time (float32 throughout).

    >>> sincos_2d_position_embedding((2, 3), 8).shape
    (6, 8)
    """
    grid_h, grid_w = grid_size
    if hidden_size % 4:
        raise ValueError(f"sincos2d needs hidden_size divisible by 4, got {hidden_size}.")
    dtype = "float64" if xp is np else "float32"
    cells = xp.arange(grid_h * grid_w, dtype=dtype)  # row-major, as the patch tokens
    y = xp.floor(cells / xp.array(grid_w, dtype))
    x = cells - y * xp.array(grid_w, dtype)
    if form not in SINCOS_FORMS:
        raise ValueError(f"form must be one of {tuple(SINCOS_FORMS)}, got {form!r}.")
    omega = xp.arange(hidden_size // 4, dtype=dtype) / (hidden_size // 4 + SINCOS_FORMS[form] or 1)
    omega = 1.0 / xp.power(xp.array(temperature, dtype), omega)
    y, x = y[:, None] * omega[None], x[:, None] * omega[None]
    table = xp.concatenate([xp.sin(x), xp.cos(x), xp.sin(y), xp.cos(y)], axis=1)
    return table.astype("float32") if xp is np else table


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends one learned token whose final state is the image representation.

    Takes only ``Layer`` arguments (``name``, ``dtype``, ...); its weight is ``token``,
    shape ``(1, 1, width)``.

    Examples:
        >>> import numpy as np
        >>> tuple(ClassToken()(np.zeros((2, 4, 8), "float32")).shape)
        (2, 5, 8)
    """

    def build(self, input_shape):
        # Zeros, as the original code initialises it.
        self.token = deferrable_weight(self, name="token", shape=(1, 1, input_shape[-1]), initializer="zeros")

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
class DistillationToken(ClassToken):
    """Prepends DeiT's distillation token: learned as the class token is, its final state
    read by the second classifier, trained on a teacher's predictions (Touvron et al.,
    "Training data-efficient image transformers & distillation through attention").

    Placed after the class token: called on the tokens before ``ClassToken`` is. Its weight
    is ``token``, shape ``(1, 1, width)``, drawn as timm draws it (a normal of deviation
    0.02, truncated at two deviations).

    Examples:
        >>> import numpy as np
        >>> tuple(DistillationToken()(np.zeros((2, 4, 8), "float32")).shape)
        (2, 5, 8)
    """

    def build(self, input_shape):
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        self.token = deferrable_weight(self, name="token", shape=(1, 1, input_shape[-1]), initializer=initializer)


class AddedTokens(keras.layers.Layer):
    """The base of a layer that adds ``count`` learned tokens to a sequence of tokens: before
    them (``PREPEND``) or after; a subclass makes the weight in ``build`` and says in
    ``added`` which table it broadcasts (one row per token, or one row for all)."""

    PREPEND = True

    def __init__(self, count, **kwargs):
        super().__init__(**kwargs)
        self.count = int(count)

    def added(self):
        raise NotImplementedError

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        added = ops.broadcast_to(ops.cast(self.added(), tokens.dtype), (batch, self.count, tokens.shape[-1]))
        return ops.concatenate([added, tokens] if self.PREPEND else [tokens, added], axis=1)

    def compute_output_shape(self, input_shape):
        batch, length, width = input_shape
        return (batch, None if length is None else length + self.count, width)

    def get_config(self):
        return arguments_config(self, super().get_config())


@keras.saving.register_keras_serializable(package="keras_vit")
class RegisterTokens(AddedTokens):
    """Prepends ``count`` learned tokens that no output reads: the register tokens of
    Darcet et al., "Vision Transformers Need Registers" (timm's ``reg_token``).

    Placed after the class token: called on the patch tokens before ``ClassToken`` is.
    Its weight is ``tokens``, shape ``(1, count, width)``.

    Args:
        count: how many tokens.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> tuple(RegisterTokens(4)(np.zeros((2, 9, 8), "float32")).shape)
        (2, 13, 8)
    """

    def build(self, input_shape):
        self.tokens = deferrable_weight(
            self,
            name="tokens",
            shape=(1, self.count, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=1e-6),
        )

    def added(self):
        return self.tokens


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(keras.layers.Layer):
    """Adds a position embedding to ``num_prefix_tokens`` + grid tokens.

    Called on the tokens alone, the grid is ``grid_size``. Called as ``layer(tokens,
    patch_map)`` with the patch embedding's ``(batch, rows, cols, width)`` map, the grid is
    the map's (a dynamic-size model): a learned table is resampled to it in the graph, as
    timm's ``resample_abs_pos_embed`` does for ``dynamic_img_size=True`` (prefix rows kept,
    float32, antialiased ``interpolation``), and a "sincos2d" table is computed for it.

    Args:
        grid_size: ``(rows, cols)`` of the patch grid the table is stored for.
        num_prefix_tokens: rows of the table before the grid's: the tokens before the
            grid (class and register tokens), or 0 where the table is added to the patch
            tokens before those are prepended.
        kind: ``"learned"`` (the paper's 1D table, one row per token, the class token
            included: shape ``(1, prefix + rows * cols, width)`` as in every checkpoint) or
            ``"sincos2d"`` (fixed, no weights; prefix tokens get no position).
        interpolation: how a learned table is resampled to another grid, ``"bicubic"``
            (timm's) or ``"bilinear"``; both antialiased as
            ``torch.nn.functional.interpolate(..., antialias=True)``.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> layer = PositionEmbedding(grid_size=(2, 2), num_prefix_tokens=1)
        >>> tuple(layer(np.zeros((3, 5, 8), "float32")).shape)
        (3, 5, 8)
        >>> patch_map = np.zeros((3, 3, 4, 8), "float32")  # a 3x4 grid: the table is resampled
        >>> tuple(layer(np.zeros((3, 13, 8), "float32"), patch_map).shape)
        (3, 13, 8)
    """

    def __init__(self, grid_size, num_prefix_tokens=1, kind="learned", *, interpolation="bicubic", **kwargs):
        super().__init__(**kwargs)
        if kind not in POSITION_TABLES:
            raise ValueError(f"position_embedding must be one of {POSITION_TABLES}, got {kind!r}.")
        if interpolation not in POSITION_INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {POSITION_INTERPOLATIONS}, got {interpolation!r}.")
        self.grid_size = tuple(int(s) for s in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.kind = kind
        self.interpolation = interpolation

    @property
    def num_tokens(self):
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def build(self, input_shape):
        width = input_shape[-1]
        if self.kind == "learned":
            self.embedding = deferrable_weight(
                self,
                name="embedding",
                shape=(1, self.num_tokens, width),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        else:
            # Fixed: kept as a constant, not a weight, so checkpoints carry nothing for it.
            self._fixed = self._with_prefix(sincos_2d_position_embedding(self.grid_size, width)[None])

    def call(self, tokens, patch_map=None):
        grid = self.grid_size if patch_map is None else tuple(ops.shape(patch_map)[1:3])
        if patch_map is None and tokens.shape[1] != self.num_tokens:
            raise ValueError(
                f"{self.name}: expected {self.num_tokens} tokens (a {self.grid_size} patch grid), got "
                f"{tokens.shape[1]}: the images are not the size the model was built for. Resize them, "
                "build the model at their size (create_model(..., image_size=...)) and load the weights "
                "into it, or build it with dynamic_image_size=True."
            )
        return tokens + ops.cast(self.table(grid), tokens.dtype)

    def table(self, grid):
        """The ``(1, prefix + rows * cols, width)`` embedding for a ``(rows, cols)`` grid
        (ints, or integer scalar tensors inside a graph that does not know them)."""
        known = all(isinstance(side, int) for side in grid)
        if known and tuple(grid) == self.grid_size:
            return self.embedding if self.kind == "learned" else self._fixed
        if self.kind == "sincos2d":
            xp = np if known else ops
            return self._with_prefix(sincos_2d_position_embedding(grid, self._fixed.shape[-1], xp=xp)[None], xp)
        table = ops.cast(self.embedding, "float32")  # resampled in float32, as timm does
        prefix, cells = table[:, : self.num_prefix_tokens], table[0, self.num_prefix_tokens :]
        cells = ops.reshape(cells, (*self.grid_size, -1))
        rows, cols = (self._axis_weights(old, new) for old, new in zip(self.grid_size, grid))
        cells = ops.einsum("ip,jq,ijc->pqc", rows, cols, cells)
        return ops.concatenate([prefix, ops.reshape(cells, (1, -1, cells.shape[-1]))], axis=1)

    def _axis_weights(self, old, new):
        if isinstance(new, int):  # known: exact, in float64
            return axis_weights(np, old, new, 0, new, self.interpolation, True, "float64").astype("float32")
        return axis_weights(ops, old, new, 0, new, self.interpolation, True, "float32")

    def _with_prefix(self, table, xp=np):
        # Prefix tokens of a sincos2d model get no position.
        zeros = xp.zeros((1, self.num_prefix_tokens, table.shape[-1]), "float32")
        return xp.concatenate([zeros, table], axis=1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return arguments_config(self, super().get_config())


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchTokens(keras.layers.Layer):
    """Drops the prefix tokens (class token), and with ``grid_size`` lays the patch tokens
    out as a feature map: ``(batch, prefix + h*w, width)`` -> ``(batch, h, w, width)``.
    Called as ``layer(tokens, patch_map)``, the grid is that of the patch embedding's
    ``(batch, h, w, width)`` map (a dynamic-size model).

    The patch tokens are row-major over the ``(h, w)`` grid, as the patch embedding
    flattens them.

    Args:
        num_prefix_tokens: tokens before the patch grid.
        grid_size: ``(h, w)`` to reshape to (NHWC); None keeps ``(batch, h*w, width)``.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> tuple(PatchTokens(1, grid_size=(2, 3))(np.zeros((4, 7, 8), "float32")).shape)
        (4, 2, 3, 8)
    """

    def __init__(self, num_prefix_tokens=1, grid_size=None, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.grid_size = None if grid_size is None else tuple(int(s) for s in grid_size)

    def call(self, tokens, patch_map=None):
        patches = tokens[:, self.num_prefix_tokens :]
        if patch_map is not None:  # a dynamic-size model: the grid is the patch map's
            return ops.reshape(patches, (-1, *ops.shape(patch_map)[1:3], tokens.shape[-1]))
        if self.grid_size is None:
            return patches
        return ops.reshape(patches, (-1, *self.grid_size, tokens.shape[-1]))

    def compute_output_shape(self, tokens_shape, patch_map_shape=None):
        batch, length, width = tokens_shape
        if patch_map_shape is not None:
            return (batch, *patch_map_shape[1:3], width)
        if self.grid_size is None:
            return (batch, None if length is None else length - self.num_prefix_tokens, width)
        return (batch, *self.grid_size, width)

    def get_config(self):
        return arguments_config(self, super().get_config())
