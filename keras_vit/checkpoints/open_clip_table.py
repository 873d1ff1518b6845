"""Where keras-vit's weights live in open_clip's state dicts (its ``CLIP`` and
``CustomTextCLIP``): rows as ``table.py``'s, ``(Keras path regex, Source)``.

open_clip's blocks (``transformer.resblocks.{i}``) are torch's ``MultiheadAttention``: one
fused ``in_proj`` for the queries, keys and values, ``out_proj``, and an MLP of ``c_fc``
and ``c_proj``. Its projections are parameters used as ``x @ proj`` (already ``(in,
out)``), but a text projection with a bias, which is a ``Linear``.
"""

import numpy as np

from keras_vit.checkpoints.cells import (
    BLOCK,
    TEXT_BLOCK,
    Source,
    batched,
    conv,
    linear,
    linear_rows,
    norm_rows,
    same,
)


def _resblocks(block, keras_block):
    """The rows of open_clip's blocks under ``block`` (``{0}`` its index)."""
    return [
        *norm_rows(keras_block + r"norm([12])", block + "ln_{1}"),
        (keras_block + r"attention/qkv/kernel", linear(block + "attn.in_proj_weight")),
        (keras_block + r"attention/qkv/bias", same(block + "attn.in_proj_bias")),
        *linear_rows(keras_block + r"attention/out", block + "attn.out_proj"),
        *linear_rows(keras_block + r"mlp/fc1", block + "mlp.c_fc"),
        *linear_rows(keras_block + r"mlp/fc2", block + "mlp.c_proj"),
    ]


def _zero_columns(key):
    """A zero bias for a parameter used as ``x @ proj``: one per output column."""
    return Source(key, lambda w: np.zeros(np.shape(w)[1], np.asarray(w).dtype))


# open_clip's own ViT (``visual.``): the class token and positions unbatched, a norm before
# the blocks, no bias in the patch embedding, the projection as the head without a bias.
_V = "visual."
OPEN_CLIP = [
    (r"patch_embedding/kernel", conv(_V + "conv1.weight")),
    (r"class_token/token", batched(_V + "class_embedding")),
    (r"position_embedding/embedding", batched(_V + "positional_embedding")),
    *norm_rows(r"pre_norm", _V + "ln_pre"),
    *_resblocks(_V + "transformer.resblocks.{0}.", BLOCK),
    *norm_rows(r"encoder_norm", _V + "ln_post"),
    (r"head/kernel", same(_V + "proj")),
    (r"head/bias", _zero_columns(_V + "proj")),
]


def open_clip_text_rows(projection_bias=False):
    """open_clip's ``TextTransformer`` (at the top level of a ``CLIP``, under ``text.`` of a
    ``CustomTextCLIP``: the caller's prefix): the projection a parameter, or a ``Linear``
    with a bias (``proj_bias``)."""
    if projection_bias:
        projection = linear_rows(r"text_projection", "text_projection")
    else:
        projection = [(r"text_projection/kernel", same("text_projection"))]
    return [
        (r"text_embedding/token_embedding", same("token_embedding.weight")),
        (r"text_embedding/position_embedding", same("positional_embedding")),
        *_resblocks("transformer.resblocks.{0}.", TEXT_BLOCK),
        *norm_rows(r"text_norm", "ln_final"),
        *projection,
    ]
