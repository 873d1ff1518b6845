"""What a ViT's embeddings learned: position-embedding similarity and the patch filters.

The paper's figure 7: the cosine similarity of each patch's position embedding with every
other's (centre), and the principal components of the patch-embedding filters (left).
"""

import numpy as np

from keras_vit.inspect.attention import check_vit


def cosine_similarity_grid(table, grid):
    """``(grid_h, grid_w, grid_h, grid_w)`` cosine similarities of a ``(grid_h * grid_w,
    width)`` table's rows (row-major over the grid).

    >>> similarity = cosine_similarity_grid(np.eye(4), (2, 2))
    >>> similarity.shape, float(similarity[0, 1, 0, 1]), float(similarity[0, 1, 1, 0])
    ((2, 2, 2, 2), 1.0, 0.0)
    """
    table = np.asarray(table, dtype="float64")
    if table.ndim != 2 or table.shape[0] != grid[0] * grid[1]:
        raise ValueError(f"Expected a ({grid[0] * grid[1]}, width) table for a {tuple(grid)} grid; got {table.shape}.")
    unit = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    return (unit @ unit.T).reshape(*grid, *grid).astype("float32")


def position_embedding_similarity(model):
    """Cosine similarity of each patch's position embedding with every other's.

    Returns ``(grid_h, grid_w, grid_h, grid_w)``: ``[i, j]`` is the map of patch
    ``(i, j)``'s similarity with every patch (figure 7, centre); the class token's row is
    left out. Learned and "sincos2d" tables alike, at the model's grid.

    >>> import keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=(32, 48), depth=1, num_classes=3)
    >>> similarity = position_embedding_similarity(model)
    >>> similarity.shape, round(float(similarity[1, 2, 1, 2]), 4)
    ((2, 3, 2, 3), 1.0)
    """
    import keras

    check_vit(model, "position_embedding_similarity")
    layer = model.get_layer("position_embedding")
    table = keras.ops.convert_to_numpy(keras.ops.cast(layer.table(model.spec.grid_size), "float32"))
    return cosine_similarity_grid(table[0, model.spec.position_prefix_rows :], model.spec.grid_size)


def principal_components(vectors, num_components):
    """The top principal components of ``vectors`` (rows, centred): ``(components, dim)``
    unit vectors, and the fraction of the variance each explains. Each component's sign
    makes its largest entry positive, so that the result is deterministic.

    >>> components, explained = principal_components(np.diag([3.0, 1.0]) @ np.eye(2), 1)
    >>> components.shape, explained.shape
    ((1, 2), (1,))
    """
    vectors = np.asarray(vectors, dtype="float64")
    centred = vectors - vectors.mean(axis=0)
    _, singular, directions = np.linalg.svd(centred, full_matrices=False)
    components = directions[:num_components]
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    variance = singular**2
    explained = variance[:num_components] / max(variance.sum(), 1e-300)
    return components * signs[:, None], explained


def embedding_filters(model, num_components=28, return_explained=False):
    """The principal components of the patch-embedding filters as RGB tiles.

    Figure 7 (left): the ``hidden_size`` filters, each a ``patch x patch x channels``
    tile, and their top ``num_components`` principal components as tiles
    ``(num_components, patch, patch, channels)`` (unit norm; scale them for display),
    and with ``return_explained`` the fraction of the filters' variance each explains.

    >>> import keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=32, depth=1, num_classes=3)
    >>> embedding_filters(model, 4).shape
    (4, 16, 16, 3)
    """
    import keras

    check_vit(model, "embedding_filters")
    spec = model.spec
    if spec.resnet is not None:
        raise ValueError(
            "embedding_filters: this hybrid's patch embedding filters ResNet features, not pixels; the paper's "
            "figure is of a plain ViT."
        )
    kernel = keras.ops.convert_to_numpy(keras.ops.cast(model.get_layer("patch_embedding").kernel, "float32"))
    size, _, channels, width = kernel.shape
    if not 1 <= num_components <= min(width, size * size * channels):
        raise ValueError(
            f"num_components must be in 1..{min(width, size * size * channels)} (filters: {width} of "
            f"{size}x{size}x{channels}); got {num_components}."
        )
    filters = kernel.reshape(-1, width).T  # one row per filter
    components, explained = principal_components(filters, num_components)
    tiles = components.reshape(num_components, size, size, channels).astype("float32")
    return (tiles, explained) if return_explained else tiles
