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
- ``"mixed"``: RoPE-Mixed's (Heo et al., "Rotary Position Embedding for Vision
  Transformer", 2024; timm's ``rope_type="mixed"``): learned frequencies, a pair of them
  (one per axis) for each block, head and channel pair, so that a pair turns by a learned
  mix of the row and column indices; the interleaved layout. Its table has a block axis
  and a head axis: ``(depth, 2, tokens, heads, head_dim)``.

``grid_offset`` shifts every coordinate before it is scaled (Perception Encoder's 1).

The prefix tokens (class, registers) are not turned: their rows of the table turn by zero.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.layer_rules import check_rope_head_width
from keras_vit.layers.arguments import arguments_config
from keras_vit.layers.initializers import deferrable_weight
from keras_vit.vocabulary import GRID_INDEXINGS, LEARNED_FORMS, ROPE_FORMS

# The temperature each form takes where none is given.
ROPE_TEMPERATURES = {"dinov3": 100.0, "axial": 10_000.0, "mixed": 10.0}


def grid_coordinates(grid, grid_indexing="ij", offset=0.0, xp=np):
    """Each patch's two indices (plus ``offset``), ``(rows * cols, 2)`` in row-major token
    order: the row's then the column's (``"ij"``), or the column's first (``"xy"``).

    ``grid`` is ``(rows, cols)``, ints (numpy, in float64) or scalar tensors (``keras.ops``,
    float32) for a grid known only at run time.

    >>> grid_coordinates((2, 3), "xy")[:4].tolist()
    [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]
    """
    dtype = "float64" if xp is np else "float32"
    y, x = (xp.arange(side, dtype=dtype) + offset for side in grid)
    y = xp.reshape(xp.tile(y[:, None], (1, grid[1])), (-1,))
    x = xp.reshape(xp.tile(x[None, :], (grid[0], 1)), (-1,))
    return xp.stack([y, x] if grid_indexing == "ij" else [x, y], axis=1)


def _sides(grid, xp):
    """The grid's two sides as floats (numpy) or float32 scalars (``keras.ops``)."""
    return [float(side) if xp is np else xp.cast(side, "float32") for side in grid]


def dinov3_angles(grid, head_dim, temperature, xp=np, offset=0.0):
    """Each patch's angles, ``(rows * cols, head_dim // 2)``: the row coordinate's
    ``head_dim // 4`` frequencies, then the column's (``grid`` as ``grid_coordinates``').

    >>> dinov3_angles((2, 3), 8, 100.0).shape
    (6, 4)
    """
    dtype = "float64" if xp is np else "float32"
    rows, cols = _sides(grid, xp)
    # Patch centres, row-major as the patch tokens: (k + 0.5) / n mapped to [-1, 1].
    centres = grid_coordinates(grid, "ij", 0.5 + offset, xp)
    y, x = centres[:, 0] / rows * 2.0 - 1.0, centres[:, 1] / cols * 2.0 - 1.0
    quarter = head_dim // 4
    inverse_periods = 1.0 / xp.power(xp.array(temperature, dtype), xp.arange(quarter, dtype=dtype) * 4.0 / head_dim)
    turns = 2.0 * math.pi * inverse_periods
    return xp.concatenate([y[:, None] * turns[None], x[:, None] * turns[None]], axis=1)


def axial_angles(grid, head_dim, temperature, reference_grid=None, xp=np, offset=0.0):
    """Each patch's angles, ``(rows * cols, head_dim // 2)``: the row index's ``head_dim // 4``
    frequencies, then the column's; the indices (plus ``offset``) scaled to
    ``reference_grid`` where given.

    >>> axial_angles((2, 3), 8, 10_000.0, (4, 4))[:, 0].tolist()  # the rows' first band
    [0.0, 0.0, 0.0, 2.0, 2.0, 2.0]
    """
    dtype = "float64" if xp is np else "float32"
    indices = grid_coordinates(grid, "ij", offset, xp)
    y, x = indices[:, 0], indices[:, 1]
    if reference_grid is not None:
        rows, cols = _sides(grid, xp)
        y, x = y / rows * reference_grid[0], x / cols * reference_grid[1]
    quarter = head_dim // 4
    bands = 1.0 / xp.power(xp.array(temperature, dtype), xp.arange(quarter, dtype=dtype) / quarter)
    return xp.concatenate([y[:, None] * bands[None], x[:, None] * bands[None]], axis=1)


@keras.saving.register_keras_serializable(package="keras_vit")
class MixedFrequencies(keras.initializers.Initializer):
    """RoPE-Mixed's starting frequencies, ``(2, depth, heads, head_dim // 2)``: for each
    block and head a random rotation of the axial bands ``temperature ** (-4 i / head_dim)``,
    one copy at that angle and one a quarter-turn on (the first coordinate's weights, then
    the second's), as the RoPE-Mixed authors and timm (``init_random_2d_freqs``) start them.

    >>> tuple(MixedFrequencies(10.0)((2, 3, 4, 8)).shape)
    (2, 3, 4, 8)
    """

    def __init__(self, temperature=10.0, seed=None):
        self.temperature = float(temperature)
        self.seed = seed

    def __call__(self, shape, dtype=None):
        _, depth, heads, half = shape
        bands = ops.convert_to_tensor(1.0 / self.temperature ** (np.arange(half // 2) * 4.0 / (2 * half)), "float32")
        angles = keras.random.uniform((depth, heads, 1), maxval=2 * math.pi, seed=self.seed)
        first = ops.concatenate([bands * ops.cos(angles), bands * ops.cos(angles + math.pi / 2)], axis=-1)
        second = ops.concatenate([bands * ops.sin(angles), bands * ops.sin(angles + math.pi / 2)], axis=-1)
        return ops.cast(ops.stack([first, second]), dtype or "float32")

    def get_config(self):
        return {"temperature": self.temperature, "seed": self.seed}


def rotate(x, table, interleaved=False):
    """``x`` (``(batch, tokens, heads, head_dim)``) turned by ``table``
    (``(2, tokens, head_dim)``: sines, then cosines; or ``(2, tokens, heads, head_dim)``,
    one table per head): ``x * cos + partner(x) * sin``, the
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
    if len(table.shape) == 3:  # one for every head
        sin, cos = table[0][None, :, None, :], table[1][None, :, None, :]
    else:
        sin, cos = table[0][None], table[1][None]
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
    turns its queries and keys by (``rotate``); for the ``"mixed"`` form, the
    ``(depth, 2, tokens, heads, head_dim)`` tables of every block and head, from its one
    weight, ``frequencies`` (``(2, depth, heads, head_dim // 2)``; the other forms have none).

    Called on the token sequence, the grid is ``grid_size``; called as ``layer(tokens,
    patch_map)`` with the patch embedding's ``(batch, rows, cols, width)`` map, it is the
    map's (a dynamic-size model), computed in the graph. The first ``num_prefix_tokens``
    rows turn by zero (sine 0, cosine 1).

    Args:
        grid_size: ``(rows, cols)`` of the patch grid at the model's image size.
        head_dim: channels per attention head (divisible by 4: two axes, pairs of channels).
        num_prefix_tokens: tokens before the grid, left as they are.
        form: one of ``ROPE_FORMS``.
        temperature: the frequencies' base (for ``"mixed"``, their start's); None: the
            form's (``ROPE_TEMPERATURES``).
        reference_grid: ``"axial"``: the grid the indices are scaled to; None: as they are.
        grid_indexing: ``"ij"``: the row coordinate's frequencies first, then the column's;
            ``"xy"``: the column's first (timm's ``rope_grid_indexing="xy"``, the RoPE-ViTs').
        grid_offset: added to every coordinate before it is scaled (timm's
            ``rope_grid_offset``: Perception Encoder's 1).
        depth, num_heads: ``"mixed"``: the blocks and heads that learn frequencies.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> layer = RotaryEmbedding((2, 3), head_dim=8, num_prefix_tokens=1)
        >>> tuple(layer(np.zeros((1, 7, 16), "float32")).shape)
        (2, 7, 8)
        >>> mixed = RotaryEmbedding((2, 3), head_dim=8, num_prefix_tokens=1, form="mixed", depth=3, num_heads=2)
        >>> tuple(mixed(np.zeros((1, 7, 16), "float32")).shape)
        (3, 2, 7, 2, 8)
    """

    def __init__(
        self,
        grid_size,
        head_dim,
        num_prefix_tokens=0,
        *,
        form="dinov3",
        temperature=None,
        reference_grid=None,
        grid_indexing="ij",
        grid_offset=0.0,
        depth=None,
        num_heads=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if form not in ROPE_FORMS:
            raise ValueError(f"rope must be one of {tuple(ROPE_FORMS)} or None, got {form!r}.")
        check_rope_head_width(form, head_dim)
        learned = form in LEARNED_FORMS
        if learned and not (depth and num_heads):
            raise ValueError(f"rope={form!r} learns frequencies per block and head: it needs depth and num_heads.")
        self.grid_size = tuple(int(s) for s in grid_size)
        self.head_dim = int(head_dim)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.form = form
        self.temperature = float(ROPE_TEMPERATURES[form] if temperature is None else temperature)
        self.reference_grid = None if reference_grid is None else tuple(int(s) for s in reference_grid)
        if grid_indexing not in GRID_INDEXINGS:
            raise ValueError(f"rope_grid_indexing must be one of {GRID_INDEXINGS}, got {grid_indexing!r}.")
        self.grid_indexing = grid_indexing
        self.grid_offset = float(grid_offset)
        self.depth = int(depth) if learned else None
        self.num_heads = int(num_heads) if learned else None
        # The built size's, a constant: the table, or a learned form's coordinates.
        self._fixed = self._coordinates(self.grid_size, np) if learned else self._table(self.grid_size, np)

    def build(self, *shapes):
        if self.form in LEARNED_FORMS:
            self.frequencies = deferrable_weight(
                self,
                name="frequencies",
                shape=(2, self.depth, self.num_heads, self.head_dim // 2),
                initializer=MixedFrequencies(self.temperature),
                dtype="float32",  # angles in float32 under any policy
                autocast=False,
            )

    def _coordinates(self, grid, xp):
        return grid_coordinates(grid, self.grid_indexing, self.grid_offset, xp)

    def _layout(self, angles, xp):
        """Angles ``(..., tokens, head_dim // 2)`` -> the ``(2, ..., prefix + tokens, head_dim)``
        sines and cosines in the form's layout."""
        if ROPE_FORMS[self.form]:  # interleaved: each angle for a pair of neighbours
            angles = xp.reshape(xp.stack([angles, angles], axis=-1), (*angles.shape[:-2], -1, self.head_dim))
        else:  # half-split: the angles for the first half, again for the second
            angles = xp.concatenate([angles, angles], axis=-1)
        prefix = (*angles.shape[:-2], self.num_prefix_tokens, self.head_dim)
        sin = xp.concatenate([xp.zeros(prefix, angles.dtype), xp.sin(angles)], axis=-2)
        cos = xp.concatenate([xp.ones(prefix, angles.dtype), xp.cos(angles)], axis=-2)
        return xp.stack([sin, cos])

    def _table(self, grid, xp):
        if self.form == "dinov3":
            angles = dinov3_angles(grid, self.head_dim, self.temperature, xp, self.grid_offset)
        else:
            angles = axial_angles(grid, self.head_dim, self.temperature, self.reference_grid, xp, self.grid_offset)
        if self.grid_indexing == "xy":  # the column's frequencies first
            quarter = self.head_dim // 4
            angles = xp.concatenate([angles[:, quarter:], angles[:, :quarter]], axis=1)
        table = self._layout(angles, xp)
        return table.astype("float32") if xp is np else ops.cast(table, "float32")

    def _mixed_tables(self, coordinates):
        # Each block's and head's angles: the learned mix of the two coordinates,
        # (depth, heads, tokens, head_dim // 2), the tokens next to last as _layout takes
        # them; then sines and cosines with the block first.
        coordinates = ops.cast(coordinates, "float32")
        frequencies = ops.cast(self.frequencies, "float32")
        angles = ops.einsum("tc,cdhf->dhtf", coordinates, frequencies)
        table = self._layout(angles, ops)  # (2, depth, heads, tokens, head_dim)
        return ops.transpose(table, (1, 0, 3, 2, 4))

    def call(self, tokens, patch_map=None):
        if self.form in LEARNED_FORMS:
            coordinates = self._fixed if patch_map is None else self._coordinates(tuple(ops.shape(patch_map)[1:3]), ops)
            return self._mixed_tables(coordinates)
        if patch_map is None:
            return ops.convert_to_tensor(self._fixed)
        return self._table(tuple(ops.shape(patch_map)[1:3]), ops)

    def compute_output_spec(self, tokens, patch_map=None):
        # float32 under any policy, as call returns it: the precision the angles need.
        if self.form in LEARNED_FORMS:
            return keras.KerasTensor((self.depth, 2, tokens.shape[1], self.num_heads, self.head_dim), "float32")
        return keras.KerasTensor((2, tokens.shape[1], self.head_dim), "float32")

    def get_config(self):
        return arguments_config(self, super().get_config())
