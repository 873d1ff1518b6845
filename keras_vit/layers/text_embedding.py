"""The text tower's input: token ids to vectors, each id's plus its position's."""

import keras
from keras import ops

from keras_vit.layers.arguments import arguments_config
from keras_vit.layers.initializers import deferrable_weight


@keras.saving.register_keras_serializable(package="keras_vit")
class TextEmbedding(keras.layers.Layer):
    """Token ids ``(batch, length)`` to ``(batch, length, hidden_size)``: each id's learned
    vector plus a learned vector per position (CLIP's and SigLIP's text towers), for up to
    ``context_length`` ids.

    Weights: ``token_embedding`` ``(vocabulary_size, hidden_size)`` and
    ``position_embedding`` ``(context_length, hidden_size)``.

    >>> import numpy as np
    >>> tuple(TextEmbedding(10, 8, 4)(np.array([[1, 2, 3, 0]])).shape)
    (1, 4, 8)
    """

    def __init__(self, vocabulary_size, hidden_size, context_length, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size, self.hidden_size = int(vocabulary_size), int(hidden_size)
        self.context_length = int(context_length)

    def build(self, input_shape):
        # As open_clip initialises them: the tokens' at 0.02, the positions' at 0.01.
        self.token_embedding = deferrable_weight(
            self,
            name="token_embedding",
            shape=(self.vocabulary_size, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        self.position_embedding = deferrable_weight(
            self,
            name="position_embedding",
            shape=(self.context_length, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.01),
        )

    def call(self, token_ids):
        length = ops.shape(token_ids)[1]
        vectors = ops.take(self.token_embedding, ops.cast(token_ids, "int32"), axis=0)
        return vectors + self.position_embedding[None, :length]

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        return arguments_config(self, super().get_config())
