"""The text tower's pooling: the one token whose vector stands for the whole text."""

import keras
from keras import ops

from keras_vit.layer_rules import check_end_id
from keras_vit.layers.arguments import arguments_config
from keras_vit.vocabulary import END_OF_TEXT_RULES


@keras.saving.register_keras_serializable(package="keras_vit")
class EndOfTextPooling(keras.layers.Layer):
    """``(tokens (batch, length, width), token_ids (batch, length))`` to ``(batch, width)``:
    each text's vector at the position ``rule`` (``END_OF_TEXT_RULES``) finds.

    >>> import numpy as np
    >>> tokens = np.arange(12, dtype="float32").reshape(1, 4, 3)
    >>> np.asarray(EndOfTextPooling("highest_id")(tokens, np.array([[5, 9, 9, 0]]))).tolist()
    [[3.0, 4.0, 5.0]]
    """

    def __init__(self, rule="highest_id", end_id=None, **kwargs):
        super().__init__(**kwargs)
        if rule not in END_OF_TEXT_RULES:
            raise ValueError(f"rule must be one of {END_OF_TEXT_RULES}; got {rule!r}.")
        check_end_id(rule, end_id)
        self.rule, self.end_id = rule, end_id

    def call(self, tokens, token_ids):
        if self.rule == "last":
            return tokens[:, -1]
        found = token_ids if self.rule == "highest_id" else ops.cast(ops.equal(token_ids, self.end_id), "int32")
        # A one-hot sum: exact (zeros and the one vector), and one op on every backend.
        where = ops.one_hot(ops.argmax(found, axis=-1), tokens.shape[1], dtype=tokens.dtype)
        return ops.sum(tokens * where[:, :, None], axis=1)

    def compute_output_shape(self, tokens_shape, token_ids_shape=None):
        return (tokens_shape[0], tokens_shape[-1])

    def get_config(self):
        return arguments_config(self, super().get_config())
