"""What a ViT attends to: the attention maps, their rollout, and the attention distance.

The paper's section 4.5: attention rollout (Abnar & Zuidema, 2020) for figure 6 and the
mean attention distance for figures 7 (right) and 10. Each model function runs the model
once through ``model.attention_model()``, a second graph over the same weights with the
attention written out; the model's own graph keeps the fused attention. The arithmetic
on the maps is in numpy functions of their own (``rollout``, ``attention_distance``), so
that it can be checked on constructed maps.
"""

import numpy as np

from keras_vit.images import as_model_input
from keras_vit.internals import set_untracked
from keras_vit.models.graph import block_indices
from keras_vit.vocabulary import HEAD_FUSIONS


def check_vit(model, what="this"):
    """The model, checked to be a ``keras_vit.VisionTransformer``."""
    from keras_vit.models.vit import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"Expected a keras_vit.VisionTransformer for {what}; got a {type(model).__name__} "
            f"{getattr(model, 'name', '')!r}."
        )
    return model


def _images(model, images, preprocessed=None):
    """``images`` as a float32 batch the model takes (raw ones pre-processed by
    ``model.preprocessing``, as ``model.classify`` does), or a clear error."""
    images = as_model_input(images, model.preprocessing, preprocessed)
    if images.ndim == 3:
        images = images[None]
    spec = model.spec
    expected = ("any", "any") if spec.dynamic_image_size else spec.image_size
    if images.ndim != 4 or images.shape[-1] != spec.num_channels:
        raise ValueError(
            f"Expected images of shape (batch, height, width, {spec.num_channels}) pre-processed for the model; "
            f"got shape {images.shape}."
        )
    if not spec.dynamic_image_size and images.shape[1:3] != spec.image_size:
        raise ValueError(
            f"Expected {expected[0]}x{expected[1]} images (the model's image size; model.preprocessing makes "
            f"them from any image); got shape {images.shape}."
        )
    return images


def _grid(model, images):
    return tuple(side // model.spec.stride for side in images.shape[1:3])


def attention_maps(model, images, blocks=None, batch_size=16, preprocessed=None):
    """Every block's softmax attention on ``images``: ``(blocks, batch, heads, tokens, tokens)``.

    The weights of the explicit attention (``softmax(q k^T / sqrt(d))``, rows summing to
    one, the class token first), equal to HF's eager ``output_attentions`` and timm's
    unfused attention for the same weights. The model's own ``predict`` keeps its fused
    attention: the maps come from a second graph over the same weights, built once per
    model.

    Args:
        model: a ``keras_vit.VisionTransformer``, plain or hybrid.
        images: what ``model.classify`` takes (raw 0..255 pixels as uint8: one image, a
            batch or a list of images of any sizes; image files' paths; PIL images),
            pre-processed here by ``model.preprocessing``; or float ``(batch, height,
            width, channels)`` images already pre-processed for the model (floats outside
            what its pre-processing makes, raw 0..255 floats say, are refused).
        blocks: which blocks (None: all; indices, negative from the end).
        batch_size: images per forward pass.
        preprocessed: None: as the dtype says (uint8, files, PIL images: raw; floats:
            pre-processed); False: raw 0..255 pixels whatever their dtype; True: taken as
            they are, unchecked.

    Returns:
        A float32 numpy array ``(len(blocks), batch, heads, tokens, tokens)``.

    >>> import numpy as np, keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=32, depth=2, num_classes=3)
    >>> attention_maps(model, np.zeros((1, 32, 32, 3))).shape  # 2 blocks, 3 heads, 1 + 2x2 tokens
    (2, 1, 3, 5, 5)
    """
    check_vit(model, "attention_maps")
    indices = block_indices(blocks, model.spec.depth)
    return _maps(model, _images(model, images, preprocessed), indices, batch_size)


def _maps(model, images, indices, batch_size):
    """``attention_maps`` of a checked batch."""
    maps = _attention_model(model).predict(images, batch_size=batch_size, verbose=0)
    maps = maps if isinstance(maps, (list, tuple)) else [maps]  # Keras unwraps a one-block list
    return np.stack([np.asarray(maps[i], dtype="float32") for i in indices])


def _attention_model(model):
    # Cached on the model, untracked by Keras (a built model takes no new layers), so that
    # asking twice compiles once.
    cached = model.__dict__.get("_keras_vit_attention_model")
    if cached is None:
        cached = model.attention_model()
        set_untracked(model, "_keras_vit_attention_model", cached)
    return cached


def rollout(attention, head_fusion="mean", discard_ratio=0.0, num_prefix_tokens=1):
    """Abnar & Zuidema's attention rollout: ``(batch, tokens, tokens)`` joint attention.

    Per block, the heads are fused (``head_fusion``), the smallest ``discard_ratio`` of
    the weights dropped (never those to the class token), the residual added as
    ``0.5 * A + 0.5 * I`` and the rows renormalised; the blocks are then multiplied
    through, first block rightmost.

    Args:
        attention: ``(blocks, batch, heads, tokens, tokens)``, as ``attention_maps``.
        head_fusion: ``"mean"`` (the paper's), ``"max"`` or ``"min"`` over heads.
        discard_ratio: fraction of each block's fused weights set to zero, in [0, 1).
        num_prefix_tokens: tokens without a position (kept when discarding).

    >>> eye = np.broadcast_to(np.eye(5), (2, 1, 3, 5, 5))  # 2 blocks of self-attention only
    >>> np.allclose(rollout(eye)[0], np.eye(5))
    True
    """
    attention = np.asarray(attention, dtype="float64")
    if attention.ndim != 5 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"Expected attention of shape (blocks, batch, heads, tokens, tokens); got {attention.shape}.")
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion must be one of {HEAD_FUSIONS}; got {head_fusion!r}.")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1); got {discard_ratio!r}.")
    fused = getattr(np, head_fusion)(attention, axis=2)  # (blocks, batch, tokens, tokens)
    tokens = fused.shape[-1]
    if discard_ratio:
        flat = fused.reshape(*fused.shape[:2], -1).copy()
        drop = int(flat.shape[-1] * discard_ratio)
        lowest = np.argsort(flat, axis=-1)[..., :drop]
        keep = (lowest % tokens) < num_prefix_tokens  # weights to the class token stay
        np.put_along_axis(flat, lowest, np.where(keep, np.take_along_axis(flat, lowest, -1), 0.0), axis=-1)
        fused = flat.reshape(fused.shape)
    joint = np.broadcast_to(np.eye(tokens), fused.shape[1:]).copy()
    for block in fused:
        mixed = 0.5 * block + 0.5 * np.eye(tokens)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        joint = mixed @ joint
    return joint


def attention_rollout(model, images, head_fusion="mean", discard_ratio=0.0, batch_size=16, preprocessed=None):
    """Where the class token looks through all the blocks: ``(batch, grid_h, grid_w)``.

    The paper's figure 6: the rollout of every block's attention (``rollout``), read from
    the class token's row over the patches; for a model without a class token, the mean
    over all rows. Each map sums to at most one; ``overlay`` lays it on the images.
    ``images`` and ``preprocessed`` as ``attention_maps`` takes them: raw images (uint8,
    files, PIL) go through ``model.preprocessing``.

    >>> import numpy as np, keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=(32, 48), depth=2, num_classes=3)
    >>> attention_rollout(model, np.zeros((1, 32, 48, 3))).shape
    (1, 2, 3)
    """
    check_vit(model, "attention_rollout")
    images = _images(model, images, preprocessed)
    prefix = model.spec.num_prefix_tokens
    maps = _maps(model, images, block_indices(None, model.spec.depth), batch_size)
    joint = rollout(maps, head_fusion, discard_ratio, prefix)
    rows = joint[:, 0] if model.spec.has_class_token else joint.mean(axis=1)
    return rows[:, prefix:].reshape(len(images), *_grid(model, images)).astype("float32")


def overlay(images, maps, alpha=0.6):
    """``maps`` (each scaled to its maximum) as a heat colour over ``images``: uint8 RGB.

    Args:
        images: ``(batch, height, width, 3)`` raw 0..255 images (or pre-processed in
            [-1, 1] or [0, 1], rescaled for display).
        maps: ``(batch, grid_h, grid_w)``, e.g. ``attention_rollout``'s; resized to the
            images (bilinear).
        alpha: the heat's opacity where a map is at its maximum.

    >>> overlay(np.zeros((1, 8, 8, 3)), np.eye(2)[None]).shape
    (1, 8, 8, 3)
    """
    from keras_vit.checkpoints.resample import resize_grid

    images = np.asarray(images, dtype="float64")
    maps = np.asarray(maps, dtype="float64")
    if images.ndim != 4 or images.shape[-1] != 3 or maps.ndim != 3 or len(maps) != len(images):
        raise ValueError(
            f"Expected images (batch, height, width, 3) and maps (batch, grid_h, grid_w) of the same batch; got "
            f"{images.shape} and {maps.shape}."
        )
    low, high = images.min(), images.max()
    scale = 255.0 if high > 1.0 else 1.0
    pictures = (images - min(low, 0.0)) / (scale - min(low, 0.0))  # 0..1 for display
    heat = np.stack([resize_grid(m[..., None], images.shape[1:3], "bilinear", False)[..., 0] for m in maps])
    heat = heat / np.maximum(heat.max(axis=(1, 2), keepdims=True), 1e-12)
    colour = np.stack(
        [np.clip(2 * heat, 0, 1), np.clip(2 * heat - 1, 0, 1), np.zeros_like(heat)], -1
    )  # black-red-yellow
    weight = alpha * heat[..., None]
    return np.round(255 * ((1 - weight) * pictures + weight * colour)).clip(0, 255).astype("uint8")


def patch_centres(grid, stride):
    """``(grid_h * grid_w, 2)`` pixel coordinates (row, column) of the patch centres, row-major."""
    rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    return (np.stack([rows.ravel(), cols.ravel()], axis=1) + 0.5) * stride


def attention_distance(attention, grid, stride, num_prefix_tokens=1):
    """Mean attention distance in pixels, ``(blocks, heads)``, from attention maps.

    Per query patch, the distance to every key patch weighted by the attention between
    them; averaged over query patches and images. The prefix tokens (class token) have no
    position: they are left out, and each query's attention to the patches renormalised
    to sum to one (so uniform attention gives the grid's mean pairwise distance).

    Args:
        attention: ``(blocks, batch, heads, tokens, tokens)``.
        grid: ``(grid_h, grid_w)`` of the patch tokens.
        stride: pixels between neighbouring patch centres (the patch size; for a hybrid,
            the ResNet's stride times the patch size).
        num_prefix_tokens: tokens before the patches.

    >>> eye = np.broadcast_to(np.eye(5), (1, 1, 2, 5, 5))  # every patch attends to itself
    >>> attention_distance(eye, (2, 2), 16).tolist()
    [[0.0, 0.0]]
    """
    attention = np.asarray(attention, dtype="float64")
    patches = grid[0] * grid[1]
    if attention.ndim != 5 or attention.shape[-2:] != (num_prefix_tokens + patches,) * 2:
        raise ValueError(
            f"Expected attention (blocks, batch, heads, {num_prefix_tokens + patches}, "
            f"{num_prefix_tokens + patches}) for a {grid} grid; got {attention.shape}."
        )
    weights = attention[..., num_prefix_tokens:, num_prefix_tokens:]
    weights = weights / np.maximum(weights.sum(axis=-1, keepdims=True), 1e-12)
    centres = patch_centres(grid, stride)
    distances = np.linalg.norm(centres[:, None] - centres[None], axis=-1)  # (patches, patches)
    per_query = (weights * distances).sum(axis=-1)  # (blocks, batch, heads, patches)
    return per_query.mean(axis=(1, 3)).astype("float32")


def mean_attention_distance(model, images, batch_size=16, preprocessed=None):
    """The paper's mean attention distance, ``(depth, heads)`` in pixels, on ``images``.

    Figure 7 (right) and, for a hybrid, figure 10: each head's attention-weighted distance
    between query and key patch centres (``attention_distance``), the patch spacing being
    ``model.spec.stride`` (the total stride for a hybrid). ``images`` and ``preprocessed``
    as ``attention_maps`` takes them.

    >>> import numpy as np, keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=32, depth=2, num_classes=3)
    >>> mean_attention_distance(model, np.zeros((1, 32, 32, 3))).shape
    (2, 3)
    """
    check_vit(model, "mean_attention_distance")
    images = _images(model, images, preprocessed)
    attention = _maps(model, images, block_indices(None, model.spec.depth), batch_size)
    return attention_distance(attention, _grid(model, images), model.spec.stride, model.spec.num_prefix_tokens)
