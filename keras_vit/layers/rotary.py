"""Rotary position embeddings (RoPE) on the attention's queries and keys.

A rotary embedding gives no token a vector to add: it turns each query and key, pairs of
channels at a time, by angles that grow with the token's position, so that their dot
product depends on the two positions' offset (Su et al., "RoFormer"). On a 2-D patch grid
the head's channels split between the rows' and the columns' coordinates. The angles are
a function of the grid alone, so a model takes any image size without resampling a table.

``ROPE_FORMS`` names the ways the coordinates and frequencies are made, and the layout
of the channel pairs each turns:

- ``"dinov3"``: DINOv3's (Siméoni et al., 2025; timm's ``rope_type="dinov3"``, transformers'
  ``DINOv3ViTRopePositionEmbedding``): each patch centre in ``[-1, 1]`` per axis, periods
  ``temperature ** (4 i / head_dim)``, the half-split layout (the first half of the
  channels turned against the second).
- ``"axial"``: EVA-02's (timm's ``rope_type="cat"``, ``RotaryEmbeddingCat``): each patch's
  row and column index, scaled to a reference grid where one is given (the grid the model
  was pre-trained at), frequencies ``temperature ** (-4 i / head_dim)``, the interleaved
  layout (channels ``2i`` and ``2i + 1`` turned together).

The prefix tokens (class, registers) are not turned: their rows of the table turn by zero.
"""

import math

import keras
import numpy as np
from keras import ops

# Each form and its layout: True for the interleaved pairs, False for the half-split ones.
ROPE_FORMS = {"dinov3": False, "axial": True}
# Which coordinate's frequencies come first: the row's ("ij") or the column's ("xy").
GRID_INDEXINGS = ("ij", "xy")
# The temperature each form takes where none is given.
ROPE_TEMPERATURES = {"dinov3": 100.0, "axial": 10_000.0}


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


def axial_angles(grid, head_dim, temperature, reference_grid=None, xp=np):
    """Each patch's angles, ``(rows * cols, head_dim // 2)``: the row index's ``head_dim // 4``
    frequencies, then the column's; the indices scaled to ``reference_grid`` where given.

    >>> axial_angles((2, 3), 8, 10_000.0, (4, 4))[:, 0].tolist()  # the rows' first band
    [0.0, 0.0, 0.0, 2.0, 2.0, 2.0]
    """
    dtype = "float64" if xp is np else "float32"
    sides = [float(side) if xp is np else xp.cast(side, dtype) for side in grid]
    y, x = (xp.arange(side, dtype=dtype) for side in grid)
    if reference_grid is not None:
        y, x = y / sides[0] * reference_grid[0], x / sides[1] * reference_grid[1]
    y = xp.reshape(xp.tile(y[:, None], (1, grid[1])), (-1,))
    x = xp.reshape(xp.tile(x[None, :], (grid[0], 1)), (-1,))
    quarter = head_dim // 4
    bands = 1.0 / xp.power(xp.array(temperature, dtype), xp.arange(quarter, dtype=dtype) / quarter)
    return xp.concatenate([y[:, None] * bands[None], x[:, None] * bands[None]], axis=1)


def rotate(x, table, interleaved=False):
    """``x`` (``(batch, tokens, heads, head_dim)``) turned by ``table``
    (``(2, tokens, head_dim)``: sines, then cosines): ``x * cos + partner(x) * sin``, the
    partner of each channel the other of its pair, the first of a pair negated. The pairs are
    the two halves' channels (``i``, ``i + head_dim / 2``), or with ``interleaved`` the
    neighbours (``2i``, ``2i + 1``). Computed in the table's dtype (float32 at least),
    returned in ``x``'s.

    >>> import numpy as np
    >>> table = np.stack([np.zeros((1, 4)), np.ones((1, 4))]).astype("float32")  # angle 0
    >>> np.asarray(rotate(np.arange(4, dtype="float32").reshape(1, 1, 1, 4), table))[0, 0, 0].tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    turned = ops.cast(x, table.dtype)
    sin, cos = table[0][None, :, None, :], table[1][None, :, None, :]
    if interleaved:
        pairs = ops.reshape(turned, (*ops.shape(turned)[:-1], x.shape[-1] // 2, 2))
        swapped = ops.reshape(ops.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), ops.shape(turned))
    else:
        half = x.shape[-1] // 2
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
        temperature: the frequencies' base; None: the form's (``ROPE_TEMPERATURES``).
        reference_grid: ``"axial"``: the grid the indices are scaled to; None: as they are.
        grid_indexing: ``"ij"``: the row coordinate's frequencies first, then the column's;
            ``"xy"``: the column's first (timm's ``rope_grid_indexing="xy"``, the RoPE-ViTs').
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> layer = RotaryEmbedding((2, 3), head_dim=8, num_prefix_tokens=1)
        >>> tuple(layer(np.zeros((1, 7, 16), "float32")).shape)
        (2, 7, 8)
    """

    def __init__(
        self,
        grid_size,
        head_dim,
        num_prefix_tokens=0,
        form="dinov3",
        temperature=None,
        reference_grid=None,
        grid_indexing="ij",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if form not in ROPE_FORMS:
            raise ValueError(f"rope must be one of {tuple(ROPE_FORMS)} or None, got {form!r}.")
        if head_dim % 4:
            raise ValueError(
                f"rotary embeddings need a head width divisible by 4 (two axes, channel pairs); got {head_dim}."
            )
        self.grid_size = tuple(int(s) for s in grid_size)
        self.head_dim = int(head_dim)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.form = form
        self.temperature = float(ROPE_TEMPERATURES[form] if temperature is None else temperature)
        self.reference_grid = None if reference_grid is None else tuple(int(s) for s in reference_grid)
        if grid_indexing not in GRID_INDEXINGS:
            raise ValueError(f"rope_grid_indexing must be one of {GRID_INDEXINGS}, got {grid_indexing!r}.")
        self.grid_indexing = grid_indexing
        self._fixed = self._table(self.grid_size, np)  # the built size's, a constant

    def _table(self, grid, xp):
        if self.form == "dinov3":
            angles = dinov3_angles(grid, self.head_dim, self.temperature, xp)
        else:
            angles = axial_angles(grid, self.head_dim, self.temperature, self.reference_grid, xp)
        if self.grid_indexing == "xy":  # the column's frequencies first
            quarter = self.head_dim // 4
            angles = xp.concatenate([angles[:, quarter:], angles[:, :quarter]], axis=1)
        if ROPE_FORMS[self.form]:  # interleaved: each angle for a pair of neighbours
            angles = xp.reshape(xp.stack([angles, angles], axis=-1), (-1, self.head_dim))
        else:  # half-split: the angles for the first half, again for the second
            angles = xp.concatenate([angles, angles], axis=1)
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
            reference_grid=self.reference_grid,
            grid_indexing=self.grid_indexing,
        )
        return config
