"""keras_vit.resampling's grid and position-embedding resize against its peers: torch's
interpolate, timm and HF."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision_stub

torchvision_stub.install()

from timm.layers import resample_abs_pos_embed  # noqa: E402

from keras_vit.resampling import (  # noqa: E402
    METHODS,
    resample_position_embedding,
    resize_grid,
)

# (method, antialias) pairs torch supports; nearest has no antialiased variant.
MODES = [("nearest", False), ("bilinear", False), ("bilinear", True), ("bicubic", False), ("bicubic", True)]
# Up, down, square, non-square (one axis up, the other down), degenerate 1x1, and a
# 2 -> 82 nearest case where a float64 source index would floor differently than torch's
# float32 one.
SIZES = [
    ((7, 7), (12, 12)),
    ((14, 14), (24, 24)),
    ((24, 24), (14, 14)),
    ((6, 9), (10, 4)),
    ((1, 1), (3, 3)),
    ((2, 3), (82, 5)),
]


def _torch_resize(grid, size, method, antialias):
    x = torch.from_numpy(np.ascontiguousarray(grid.transpose(2, 0, 1)))[None]
    kwargs = {} if method == "nearest" else {"align_corners": False, "antialias": antialias}
    return F.interpolate(x, size=size, mode=method, **kwargs)[0].numpy().transpose(1, 2, 0)


@pytest.mark.parametrize("old,new", SIZES)
@pytest.mark.parametrize("method,antialias", MODES)
def test_resize_grid_matches_torch(method, antialias, old, new):
    rng = np.random.default_rng(0)
    grid = rng.standard_normal((*old, 5))
    # float64 pins the kernel formulas themselves (differences would be ~1e-2, not 1e-12) ...
    np.testing.assert_allclose(
        resize_grid(grid, new, method, antialias), _torch_resize(grid, new, method, antialias), rtol=0, atol=1e-10
    )
    # ... and float32, the dtype checkpoints come in, keeps its dtype and torch's result.
    grid32 = grid.astype(np.float32)
    out = resize_grid(grid32, new, method, antialias)
    assert out.dtype == np.float32 and out.shape == (*new, 5)
    np.testing.assert_allclose(out, _torch_resize(grid32, new, method, antialias), rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
def test_antialias_single_column_matches_torch_transposed(method):
    # torch's CPU antialias kernel mis-resamples the height axis when the output width is 1
    # (its result then disagrees with its own transposed call); the transposed call,
    # whose output height is the 1, is the consistent reference.
    grid = np.random.default_rng(1).standard_normal((4, 3, 2))
    ref = _torch_resize(grid.transpose(1, 0, 2), (1, 7), method, True).transpose(1, 0, 2)
    np.testing.assert_allclose(resize_grid(grid, (7, 1), method, True), ref, rtol=0, atol=1e-10)


def test_resize_grid_int_size_and_half_precision():
    grid = np.random.default_rng(2).standard_normal((6, 6, 3)).astype(np.float16)
    out = resize_grid(grid, 9, "bicubic", True)
    assert out.dtype == np.float16 and out.shape == (9, 9, 3)
    ref = _torch_resize(grid.astype(np.float32), (9, 9), "bicubic", True)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=0, atol=1e-2)


def _posemb(prefix, grid, dim=8, seed=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((1, prefix + grid[0] * grid[1], dim)).astype(np.float32)


@pytest.mark.parametrize(
    "old,new,prefix,method,antialias",
    [
        ((14, 14), (24, 24), 1, "bicubic", True),  # timm checkpoint_filter_fn default
        ((24, 24), (14, 14), 1, "bicubic", True),
        ((7, 7), (12, 12), 1, "bilinear", False),  # timm's .npz loader
        ((7, 7), (10, 5), 1, "bicubic", False),  # HF interpolate_pos_encoding
        ((6, 9), (10, 4), 0, "bicubic", True),  # no class token, non-square old grid
        ((6, 9), (3, 3), 2, "bilinear", True),  # class + distillation tokens
    ],
)
def test_resample_position_embedding_matches_timm(old, new, prefix, method, antialias):
    posemb = _posemb(prefix, old)
    # Pass old_grid only when it cannot be inferred, so the square default is exercised too.
    old_grid = None if old[0] == old[1] else old
    out = resample_position_embedding(posemb, new, old_grid, prefix, method, antialias)
    ref = resample_abs_pos_embed(
        torch.from_numpy(posemb),
        list(new),
        None if old_grid is None else list(old),
        num_prefix_tokens=prefix,
        interpolation=method,
        antialias=antialias,
    )
    assert out.shape == (1, prefix + new[0] * new[1], posemb.shape[-1]) == tuple(ref.shape)
    np.testing.assert_allclose(out, ref.numpy(), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(out[:, :prefix], posemb[:, :prefix])


def test_resample_position_embedding_matches_hf_vit():
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTEmbeddings

    embeddings = ViTEmbeddings(ViTConfig(hidden_size=8, image_size=28, patch_size=4))  # 7x7 grid
    posemb = _posemb(1, (7, 7))
    with torch.no_grad():
        embeddings.position_embeddings.copy_(torch.from_numpy(posemb))
        ref = embeddings.interpolate_pos_encoding(torch.zeros(1, 1 + 12 * 10, 8), 48, 40)
    out = resample_position_embedding(posemb, (12, 10), method="bicubic", antialias=False)
    np.testing.assert_allclose(out, ref.numpy(), rtol=0, atol=1e-5)


def test_resample_position_embedding_same_grid_is_unchanged_copy():
    posemb = _posemb(1, (5, 5))
    ref = resample_abs_pos_embed(torch.from_numpy(posemb), [5, 5], num_prefix_tokens=1)
    out = resample_position_embedding(posemb, 5)
    np.testing.assert_array_equal(out, ref.numpy())
    assert out is not posemb


def test_methods_constant():
    assert METHODS == ("nearest", "bilinear", "bicubic")


def test_unknown_method_names_allowed_and_given():
    with pytest.raises(ValueError, match=r"one of \('nearest', 'bilinear', 'bicubic'\), got 'area'"):
        resize_grid(np.zeros((2, 2, 1)), 3, method="area")
    with pytest.raises(ValueError, match=r"got 'lanczos'"):
        resample_position_embedding(_posemb(1, (2, 2)), 3, method="lanczos")


def test_nearest_rejects_antialias():
    with pytest.raises(ValueError, match=r"antialias=False with method='nearest'"):
        resize_grid(np.zeros((2, 2, 1)), 3, method="nearest", antialias=True)


def test_bad_shapes_say_expected_and_given():
    with pytest.raises(ValueError, match=r"expected grid of shape \(H, W, C\), got \(2, 2\)"):
        resize_grid(np.zeros((2, 2)), 3)
    with pytest.raises(ValueError, match=r"expected posemb of shape \(1, tokens, dim\).*got \(5, 8\)"):
        resample_position_embedding(np.zeros((5, 8)), 3)
    with pytest.raises(ValueError, match=r"expected posemb of shape \(1, tokens, dim\).*got \(2, 5, 8\)"):
        resample_position_embedding(np.zeros((2, 5, 8)), 3)


def test_non_square_token_count_needs_old_grid():
    with pytest.raises(ValueError, match=r"12 grid tokens is not a perfect square"):
        resample_position_embedding(_posemb(1, (3, 4)), 5)
    with pytest.raises(ValueError, match=r"old_grid \(4, 4\) needs 16 grid tokens, got 12"):
        resample_position_embedding(_posemb(1, (3, 4)), 5, old_grid=4)


def test_bad_grid_size_names_value_given():
    with pytest.raises(ValueError, match=r"new_size must be .*got \(3, 0\)"):
        resize_grid(np.zeros((2, 2, 1)), (3, 0))


def test_the_checkpoints_names_stay_importable():
    # The loader's names moved down to keras_vit.resampling (below the models, which use
    # them too); code that imports them from keras_vit.checkpoints keeps working.
    from keras_vit import checkpoints
    from keras_vit.checkpoints import resample

    assert (resample.METHODS, resample.resize_grid) == (METHODS, resize_grid)
    assert (
        resample.resample_position_embedding is checkpoints.resample_position_embedding is resample_position_embedding
    )
