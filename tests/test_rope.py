"""Rotary position embeddings (``keras_vit/layers/rotary.py``) against timm's and
transformers' own: the table of sines and cosines for a grid, the turn of the queries and
keys, the prefix tokens left alone, and a grid known only at run time.

The models that use them (DINOv3 by both hubs) are checked whole in test_family.py and
test_transformers.py.
"""

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_vit.layers import RotaryEmbedding, rotate

GRID, HEAD_DIM, PREFIX = (3, 5), 16, 2
# Angles up to 2 pi x 2 in float32 (theirs) against float64 cast to float32 (the table's).
ATOL = 2e-6


def table(**kwargs):
    layer = RotaryEmbedding(GRID, HEAD_DIM, PREFIX, **kwargs)
    return to_numpy(layer(np.zeros((1, PREFIX + GRID[0] * GRID[1], 8), "float32")))


def test_the_table_is_timms_and_transformers_dinov3_table_and_turns_no_prefix_token(timm):
    import torch
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3
    from transformers.models.dinov3_vit import modeling_dinov3_vit as dinov3

    ours = table(temperature=100.0)
    assert ours.shape == (2, PREFIX + 15, HEAD_DIM)
    # Prefix rows: sine 0, cosine 1, exactly (the class token and registers are not turned).
    np.testing.assert_array_equal(ours[0, :PREFIX], 0.0)
    np.testing.assert_array_equal(ours[1, :PREFIX], 1.0)
    sin, cos = ours[:, PREFIX:]
    timms = RotaryEmbeddingDinoV3(HEAD_DIM, temperature=100.0, rotate_half=True).get_embed(GRID).numpy()
    np.testing.assert_allclose(sin, timms[:, :HEAD_DIM], atol=ATOL)
    np.testing.assert_allclose(cos, timms[:, HEAD_DIM:], atol=ATOL)
    config = dinov3.DINOv3ViTConfig(hidden_size=HEAD_DIM * 2, num_attention_heads=2, patch_size=1, rope_theta=100.0)
    theirs_cos, theirs_sin = dinov3.DINOv3ViTRopePositionEmbedding(config).eval()(torch.zeros(1, 3, *GRID))
    np.testing.assert_allclose(sin, theirs_sin.numpy(), atol=ATOL)
    np.testing.assert_allclose(cos, theirs_cos.numpy(), atol=ATOL)
    # The temperature is DINOv3's period: another is another table.
    assert np.abs(table(temperature=10_000.0) - ours).max() > 0.1


def test_the_axial_table_and_turn_are_timms_eva02_ones(timm):
    import torch
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, apply_rot_embed_cat

    # EVA-02's: row and column indices scaled to the pre-training grid, interleaved pairs.
    layer = RotaryEmbedding(GRID, HEAD_DIM, PREFIX, form="axial", reference_grid=(16, 16))
    ours = to_numpy(layer(np.zeros((1, PREFIX + 15, 8), "float32")))
    peer = RotaryEmbeddingCat(HEAD_DIM, temperature=10_000.0, in_pixels=False, feat_shape=list(GRID),
                              ref_feat_shape=[16, 16])  # fmt: skip
    theirs = peer.get_embed().numpy()
    np.testing.assert_allclose(ours[0, PREFIX:], theirs[:, :HEAD_DIM], atol=ATOL)
    np.testing.assert_allclose(ours[1, PREFIX:], theirs[:, HEAD_DIM:], atol=ATOL)
    x = np.random.default_rng(0).normal(size=(2, PREFIX + 15, 3, HEAD_DIM)).astype("float32")
    turned = to_numpy(rotate(x, ours, interleaved=True))
    patches = torch.from_numpy(x[:, PREFIX:].transpose(0, 2, 1, 3))
    expected = apply_rot_embed_cat(patches, torch.from_numpy(theirs), half=False).numpy().transpose(0, 2, 1, 3)
    np.testing.assert_allclose(turned[:, PREFIX:], expected, atol=1e-5)
    np.testing.assert_array_equal(turned[:, :PREFIX], x[:, :PREFIX])
    # The other layout is another turn.
    assert np.abs(to_numpy(rotate(x, ours)) - turned).max() > 0.1


def test_the_xy_grid_is_timms_rope_vits_column_first_order(timm):
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat

    # The RoPE-ViTs' (timm's rope_grid_indexing="xy"): the column's frequencies first.
    layer = RotaryEmbedding(GRID, HEAD_DIM, PREFIX, form="axial", temperature=100.0, grid_indexing="xy")
    ours = to_numpy(layer(np.zeros((1, PREFIX + 15, 8), "float32")))
    peer = RotaryEmbeddingCat(HEAD_DIM, temperature=100.0, in_pixels=False, feat_shape=list(GRID), grid_indexing="xy")
    theirs = peer.get_embed().numpy()
    np.testing.assert_allclose(ours[0, PREFIX:], theirs[:, :HEAD_DIM], atol=ATOL)
    np.testing.assert_allclose(ours[1, PREFIX:], theirs[:, HEAD_DIM:], atol=ATOL)
    rows_first = to_numpy(RotaryEmbedding(GRID, HEAD_DIM, PREFIX, form="axial", temperature=100.0)(ours[:1]))
    assert np.abs(rows_first - ours).max() > 0.1


def test_an_offset_grid_is_timms_perception_encoder_grid(timm):
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, RotaryEmbeddingDinoV3

    # Perception Encoder's: the indices shifted by 1 before they are scaled to the reference grid.
    ours = table(form="axial", reference_grid=(4, 4), grid_offset=1.0)
    peer = RotaryEmbeddingCat(HEAD_DIM, temperature=10_000.0, in_pixels=False, feat_shape=list(GRID),
                              ref_feat_shape=[4, 4], grid_offset=1.0)  # fmt: skip
    theirs = peer.get_embed().numpy()
    np.testing.assert_allclose(ours[0, PREFIX:], theirs[:, :HEAD_DIM], atol=ATOL)
    np.testing.assert_allclose(ours[1, PREFIX:], theirs[:, HEAD_DIM:], atol=ATOL)
    assert np.abs(table(form="axial", reference_grid=(4, 4)) - ours).max() > 0.1
    # DINOv3's centred coordinates take the same shift (timm's grid_offset there too).
    ours = table(temperature=100.0, grid_offset=1.0)
    theirs = RotaryEmbeddingDinoV3(HEAD_DIM, temperature=100.0, rotate_half=True, grid_offset=1.0).get_embed(GRID)
    np.testing.assert_allclose(ours[0, PREFIX:], theirs.numpy()[:, :HEAD_DIM], atol=ATOL)
    assert np.abs(table(temperature=100.0) - ours).max() > 0.1


def test_the_mixed_tables_are_timms_rope_mixed_ones_per_block_and_head_at_any_grid(timm):
    import torch
    from timm.layers.pos_embed_sincos import RotaryEmbeddingMixed

    depth, heads = 3, 2
    layer = RotaryEmbedding(GRID, HEAD_DIM, PREFIX, form="mixed", depth=depth, num_heads=heads, grid_indexing="xy")
    tokens = np.zeros((1, PREFIX + 15, 8), "float32")
    layer(tokens)
    # The start: for each block and head a rotation of the axial bands (timm's magnitudes).
    start = to_numpy(layer.frequencies)
    bands = 1.0 / 10.0 ** (np.arange(HEAD_DIM // 4) * 4 / HEAD_DIM)
    np.testing.assert_allclose(np.hypot(start[0], start[1])[..., : HEAD_DIM // 4], np.broadcast_to(bands, (3, 2, 4)),
                               rtol=1e-5)  # fmt: skip
    assert np.ptp(start[0, :, :, 0]) > 0.1  # a different rotation for each block and head
    peer = RotaryEmbeddingMixed(heads * HEAD_DIM, depth, heads, temperature=10.0, feat_shape=list(GRID))
    layer.frequencies.assign(peer.freqs.detach().numpy())
    for grid in (GRID, (4, 2)):
        patch_map = np.zeros((1, *grid, 8), "float32")
        ours = to_numpy(layer(np.zeros((1, PREFIX + grid[0] * grid[1], 8), "float32"), patch_map))
        assert ours.shape == (depth, 2, PREFIX + grid[0] * grid[1], heads, HEAD_DIM)
        with torch.no_grad():
            theirs = peer.get_embed(list(grid)).numpy()  # (depth, heads, tokens, sin | cos)
        np.testing.assert_allclose(ours[:, 0, PREFIX:], theirs[..., :HEAD_DIM].transpose(0, 2, 1, 3), atol=ATOL)
        np.testing.assert_allclose(ours[:, 1, PREFIX:], theirs[..., HEAD_DIM:].transpose(0, 2, 1, 3), atol=ATOL)
        np.testing.assert_array_equal(ours[:, 1, :PREFIX], 1.0)
    # The table without a patch map is the built grid's.
    np.testing.assert_allclose(to_numpy(layer(tokens)), to_numpy(layer(tokens, np.zeros((1, *GRID, 8), "float32"))))


def test_a_grid_known_at_run_time_gives_the_built_grids_table():
    layer = RotaryEmbedding((2, 2), HEAD_DIM, PREFIX)  # built for another grid
    tokens = np.zeros((1, PREFIX + 15, 8), "float32")
    patch_map = np.zeros((1, *GRID, 8), "float32")
    np.testing.assert_allclose(to_numpy(layer(tokens, patch_map)), table(), atol=ATOL)
    # In a model with unknown sides, the same.
    inputs = keras.Input((None, 8)), keras.Input((None, None, 8))
    graph = keras.Model(inputs, layer(*inputs))
    np.testing.assert_allclose(to_numpy(graph([tokens, patch_map])), table(), atol=ATOL)


def test_rotate_is_timms_turn_of_the_patch_tokens(timm):
    import torch
    from timm.layers.pos_embed_sincos import apply_rot_embed_cat

    x = (
        np.random.default_rng(0).normal(size=(2, PREFIX + 15, 3, HEAD_DIM)).astype("float32")
    )  # (batch, tokens, heads, dim)
    ours = to_numpy(rotate(x, table()))
    np.testing.assert_array_equal(ours[:, :PREFIX], x[:, :PREFIX])
    sin_cos = torch.from_numpy(np.concatenate(table()[:, PREFIX:], axis=-1))
    patches = torch.from_numpy(x[:, PREFIX:].transpose(0, 2, 1, 3))  # timm's (batch, heads, tokens, dim)
    theirs = apply_rot_embed_cat(patches, sin_cos, half=True).numpy().transpose(0, 2, 1, 3)
    np.testing.assert_allclose(ours[:, PREFIX:], theirs, atol=1e-6)
    # A rotation: each pair of channels keeps its length.
    pairs = lambda a: np.hypot(a[..., : HEAD_DIM // 2], a[..., HEAD_DIM // 2 :])  # noqa: E731
    np.testing.assert_allclose(pairs(ours), pairs(x), rtol=1e-5)


def test_bad_rotary_options_are_clear_errors():
    with pytest.raises(ValueError, match=r"rope must be one of \('dinov3', 'axial', 'mixed'\) or None, got 'cat'"):
        RotaryEmbedding(GRID, HEAD_DIM, form="cat")
    with pytest.raises(ValueError, match="rope='mixed' learns frequencies per block and head: it needs depth"):
        RotaryEmbedding(GRID, HEAD_DIM, form="mixed")
    with pytest.raises(ValueError, match="head width divisible by 4"):
        RotaryEmbedding(GRID, 6)
    from keras_vit.models.spec import ViTSpec

    with pytest.raises(ValueError, match=r"rope='dinov3' needs a head width divisible by 4.*got 6"):
        ViTSpec(hidden_size=36, num_heads=6, rope="dinov3")
    with pytest.raises(ValueError, match="rope must be one of"):
        ViTSpec(rope="cat")
    with pytest.raises(ValueError, match="rope_reference_grid is the axial rotary embeddings'; got rope='dinov3'"):
        ViTSpec().replace(rope="dinov3", rope_reference_grid=16)
    with pytest.raises(ValueError, match="rope_grid_offset=1.0 set.s. a field of rope, which this spec has not"):
        ViTSpec().replace(rope_grid_offset=1.0)
