"""Turning the token sequence into one image vector."""

import keras
from keras import ops

from keras_vit.vocabulary import POOLINGS


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools ``(batch, tokens, width)`` to ``(batch, width)``.

    Args:
        mode: ``"token"`` takes the class token (the paper's default), ``"gap"`` averages
            the patch tokens (the paper's global-average-pooling ablation),
            ``"token_gap"`` puts the two side by side, ``(batch, 2 * width)`` (what
            DINOv2's linear classifiers read).
        num_prefix_tokens: tokens before the patch grid, left out of the average.
        index: the prefix token ``"token"`` takes: 0, the class token, or 1, DeiT's
            distillation token.
        **kwargs: ``Layer`` arguments (``name``, ``dtype``, ...).

    Examples:
        >>> import numpy as np
        >>> tuple(TokenPooling("gap", num_prefix_tokens=1)(np.ones((2, 5, 8), "float32")).shape)
        (2, 8)
    """

    def __init__(self, mode="token", num_prefix_tokens=1, index=0, **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {mode!r}.")
        if mode != "gap" and not 0 <= index < num_prefix_tokens:
            raise ValueError(
                f"pooling={mode!r} takes prefix token {index}: expected more than {index} prefix tokens (a class "
                f"token first); got num_prefix_tokens={num_prefix_tokens}."
            )
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.index = int(index)

    def call(self, tokens):
        if self.mode == "token":
            return tokens[:, self.index]
        mean = ops.mean(tokens[:, self.num_prefix_tokens :], axis=1)
        return mean if self.mode == "gap" else ops.concatenate([tokens[:, self.index], mean], axis=-1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1] * (2 if self.mode == "token_gap" else 1))

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode, num_prefix_tokens=self.num_prefix_tokens, index=self.index)
        return config
