"""A text tower as a functional ``keras.Model``: token ids to one vector per text, from a
``TextSpec``. Its layers are named ``text_*`` (``text_block_0``, ...), so that beside an
image tower in one model no variable path is another's."""

import keras

from keras_vit.layers.dense import Dense
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.layer_norm import make_norm
from keras_vit.layers.text_embedding import TextEmbedding
from keras_vit.layers.text_pooling import EndOfTextPooling


def text_block(spec, index, dtype=None):
    """Block ``index`` of the tower: the image tower's ``EncoderBlock``, its attention causal
    where the spec says so."""
    return EncoderBlock(
        spec.num_heads,
        spec.mlp_dim,
        attention_options={"kind": "causal" if spec.causal else "plain"},
        mlp_options={"activation": spec.mlp_activation, "gelu_approximate": spec.gelu_approximate},
        layer_norm_epsilon=spec.layer_norm_epsilon,
        name=f"text_block_{index}",
        dtype=dtype,
    )


def text_encoder(spec, dtype=None, name="text_encoder"):
    """``spec``'s tower: ``token_ids`` ``(batch, context_length)`` int32 to ``(batch,
    spec.width)``: embedded, the blocks, the final norm, the vector at the end of text, the
    projection (if any). Not normalised: a pair of towers normalises both.

    >>> from keras_vit.models.text_spec import TextSpec
    >>> import numpy as np
    >>> tower = text_encoder(TextSpec(vocabulary_size=10, context_length=4, hidden_size=8, depth=1, num_heads=2,
    ...                               mlp_dim=16, projection_dim=6))
    >>> tuple(tower(np.array([[1, 5, 9, 0]])).shape), tower.get_layer("text_block_0").attention.__class__.__name__
    ((1, 6), 'CausalAttention')
    """
    token_ids = keras.Input((spec.context_length,), dtype="int32", name="token_ids")
    x = TextEmbedding(spec.vocabulary_size, spec.hidden_size, spec.context_length, name="text_embedding", dtype=dtype)(
        token_ids
    )
    for index in range(spec.depth):
        x = text_block(spec, index, dtype)(x)
    epsilon = spec.layer_norm_epsilon if spec.final_norm_epsilon is None else spec.final_norm_epsilon
    x = make_norm("layernorm", epsilon, name="text_norm", dtype=dtype)(x)
    x = EndOfTextPooling(spec.pooling, spec.end_id, name="text_pooling", dtype=dtype)(x, token_ids)
    if spec.projection_dim is not None:
        x = Dense(spec.projection_dim, use_bias=spec.projection_bias, name="text_projection", dtype=dtype)(x)
    return keras.Model(token_ids, x, name=name)
