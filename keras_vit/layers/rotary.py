"""Rotary position embeddings (RoPE) on the attention's queries and keys.

A rotary embedding gives no token a vector to add: it turns each query and key, pairs of
channels at a time, by angles that grow with the token's position, so that their dot
product depends on the two positions' offset (Su et al., "RoFormer"). On a 2-D patch grid
the head's channels split between the rows' and the columns' coordinates. The angles are
a function of the grid alone, so a model takes any image size without resampling a table.

``ROPE_FORMS`` names the ways the coordinates and frequencies are made:

- ``"dinov3"``: DINOv3's (Siméoni et al., 2025; timm's ``rope_type="dinov3"``, transformers'
  ``DINOv3ViTRopePositionEmbedding``): each patch centre in ``[-1, 1]`` per axis, periods
  ``temperature ** (4 i / head_dim)``, the half-split layout (the first half of the
  channels turned against the second).

The prefix tokens (class, registers) are not turned: their rows of the table turn by zero.
"""

import math

import keras
import numpy as np
from keras import ops

ROPE_FORMS = ("dinov3",)


def dinov3_angles(grid, head_dim, temperature, xp=np):
    """Each patch's angles, ``(rows * cols, head_dim // 2)``: the row coordinate's
    ``head_dim // 4`` frequencies, then the column's.

    ``grid`` is ``(rows, cols)``, ints (numpy, in float64) or scalar tensors (``keras.ops``,
    float32) for a grid known only at run time.

    >>> dinov3_angles((2, 3), 8, 100.0).shape
    (6, 4)
    """
    dtype = "float64" if xp is np else "float32"
    rows, cols = (xp.cast(side, dtype) if xp is not np else float(side) for side in grid)
    # Patch centres, row-major as the patch tokens: (k + 0.5) / n mapped to [-1, 1].
    y = (xp.arange(grid[0], dtype=dtype) + 0.5) / rows * 2.0 - 1.0
    x = (xp.arange(grid[1], dtype=dtype) + 0.5) / cols * 2.0 - 1.0
    y = xp.reshape(xp.tile(y[:, None], (1, grid[1])), (-1,))
    x = xp.reshape(xp.tile(x[None, :], (grid[0], 1)), (-1,))
    quarter = head_dim // 4
    inverse_periods = 1.0 / xp.power(xp.array(temperature, dtype), xp.arange(quarter, dtype=dtype) * 4.0 / head_dim)
    turns = 2.0 * math.pi * inverse_periods
    return xp.concatenate([y[:, None] * turns[None], x[:, None] * turns[None]], axis=1)


def rotate(x, table):
    """``x`` (``(batch, tokens, heads, head_dim)``) turned by ``table``
    (``(2, tokens, head_dim)``: sines, then cosines), in the half-split layout:
    ``x * cos + concat(-x2, x1) * sin`` with ``x1, x2`` the two halves of the channels.
    Computed in the table's dtype (float32 at least), returned in ``x``'s.

    >>> import numpy as np
    >>> table = np.stack([np.zeros((1, 4)), np.ones((1, 4))]).astype("float32")  # angle 0
    >>> np.asarray(rotate(np.arange(4, dtype="float32").reshape(1, 1, 1, 4), table))[0, 0, 0].tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    half = x.shape[-1] // 2
    turned = ops.cast(x, table.dtype)
    sin, cos = table[0][None, :, None, :], table[1][None, :, None, :]
    swapped = ops.concatenate([-turned[..., half:], turned[..., :half]], axis=-1)
    return ops.cast(turned * cos + swapped * sin, x.dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryEmbedding(keras.layers.Layer):
    """The ``(2, tokens, head_dim)`` table of sines and cosines that each attention layer
    turns its queries and keys by (``rotate``); no weights.

    Called on the token sequence, the grid is ``grid_size``; called as ``layer(tokens,
    patch_map)`` with the patch embedding's ``(batch, rows, cols, width)`` map, it is the
    map's (a dynamic-size model), computed in the graph. The first ``num_prefix_tokens``
    rows turn by zero (sine 0, cosine 1).

    Args:
        grid_size: ``(rows, cols)`` of the patch grid at the model's image size.
        head_dim: channels per attention head (divisible by 4: two axes, pairs of channels).
        num_prefix_tokens: tokens before the grid, left as they are.
        form: one of ``ROPE_FORMS``.
        temperature: the longest period's base (DINOv3: 100).
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> layer = RotaryEmbedding((2, 3), head_dim=8, num_prefix_tokens=1)
        >>> tuple(layer(np.zeros((1, 7, 16), "float32")).shape)
        (2, 7, 8)
    """

    def __init__(self, grid_size, head_dim, num_prefix_tokens=0, form="dinov3", temperature=100.0, **kwargs):
        super().__init__(**kwargs)
        if form not in ROPE_FORMS:
            raise ValueError(f"rope must be one of {ROPE_FORMS} or None, got {form!r}.")
        if head_dim % 4:
            raise ValueError(
                f"rotary embeddings need a head width divisible by 4 (two axes, channel pairs); got {head_dim}."
            )
        self.grid_size = tuple(int(s) for s in grid_size)
        self.head_dim = int(head_dim)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.form = form
        self.temperature = float(temperature)
        self._fixed = self._table(self.grid_size, np)  # the built size's, a constant

    def _table(self, grid, xp):
        angles = dinov3_angles(grid, self.head_dim, self.temperature, xp)
        angles = xp.concatenate([angles, angles], axis=1)  # the half-split layout
        prefix = self.num_prefix_tokens
        sin = xp.concatenate([xp.zeros((prefix, self.head_dim), angles.dtype), xp.sin(angles)], axis=0)
        cos = xp.concatenate([xp.ones((prefix, self.head_dim), angles.dtype), xp.cos(angles)], axis=0)
        table = xp.stack([sin, cos])
        return table.astype("float32") if xp is np else ops.cast(table, "float32")

    def call(self, tokens, patch_map=None):
        if patch_map is None:
            return ops.convert_to_tensor(self._fixed)
        return self._table(tuple(ops.shape(patch_map)[1:3]), ops)

    def compute_output_shape(self, tokens_shape, patch_map_shape=None):
        return (2, tokens_shape[1], self.head_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            grid_size=self.grid_size,
            head_dim=self.head_dim,
            num_prefix_tokens=self.num_prefix_tokens,
            form=self.form,
            temperature=self.temperature,
        )
        return config
