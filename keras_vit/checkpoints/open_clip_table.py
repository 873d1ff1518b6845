"""Where keras-vit's weights live in open_clip's state dicts (its ``CLIP`` and
``CustomTextCLIP``): rows as ``table.py``'s, ``(Keras path regex, Source)``.

open_clip's blocks (``transformer.resblocks.{i}``) are torch's ``MultiheadAttention``: one
fused ``in_proj`` for the queries, keys and values, ``out_proj``, and an MLP of ``c_fc``
and ``c_proj``. Its projections are parameters used as ``x @ proj`` (already ``(in,
out)``), but a text projection with a bias, which is a ``Linear``.
"""

import numpy as np

from keras_vit.checkpoints.cells import BLOCK, TEXT_BLOCK, Source, batched, conv, linear, same


def _resblocks(block, keras_block):
    """The rows of open_clip's blocks under ``block`` (``{0}`` its index)."""
    return [
        (keras_block + r"norm([12])/gamma", same(block + "ln_{1}.weight")),
        (keras_block + r"norm([12])/beta", same(block + "ln_{1}.bias")),
        (keras_block + r"attention/qkv/kernel", linear(block + "attn.in_proj_weight")),
        (keras_block + r"attention/qkv/bias", same(block + "attn.in_proj_bias")),
        (keras_block + r"attention/out/kernel", linear(block + "attn.out_proj.weight")),
        (keras_block + r"attention/out/bias", same(block + "attn.out_proj.bias")),
        (keras_block + r"mlp/fc1/kernel", linear(block + "mlp.c_fc.weight")),
        (keras_block + r"mlp/fc1/bias", same(block + "mlp.c_fc.bias")),
        (keras_block + r"mlp/fc2/kernel", linear(block + "mlp.c_proj.weight")),
        (keras_block + r"mlp/fc2/bias", same(block + "mlp.c_proj.bias")),
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
    (r"pre_norm/gamma", same(_V + "ln_pre.weight")),
    (r"pre_norm/beta", same(_V + "ln_pre.bias")),
    *_resblocks(_V + "transformer.resblocks.{0}.", BLOCK),
    (r"encoder_norm/gamma", same(_V + "ln_post.weight")),
    (r"encoder_norm/beta", same(_V + "ln_post.bias")),
    (r"head/kernel", same(_V + "proj")),
    (r"head/bias", _zero_columns(_V + "proj")),
]


def open_clip_text_rows(projection_bias=False):
    """open_clip's ``TextTransformer`` (at the top level of a ``CLIP``, under ``text.`` of a
    ``CustomTextCLIP``: the caller's prefix): the projection a parameter, or a ``Linear``
    with a bias (``proj_bias``)."""
    if projection_bias:
        projection = [
            (r"text_projection/kernel", linear("text_projection.weight")),
            (r"text_projection/bias", same("text_projection.bias")),
        ]
    else:
        projection = [(r"text_projection/kernel", same("text_projection"))]
    return [
        (r"text_embedding/token_embedding", same("token_embedding.weight")),
        (r"text_embedding/position_embedding", same("positional_embedding")),
        *_resblocks("transformer.resblocks.{0}.", TEXT_BLOCK),
        (r"text_norm/gamma", same("ln_final.weight")),
        (r"text_norm/beta", same("ln_final.bias")),
        *projection,
    ]
