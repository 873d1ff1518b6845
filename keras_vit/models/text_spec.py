"""The spec of a text tower (CLIP's, SigLIP's): its architecture and numerics, as data."""

import dataclasses

from keras_vit.models import spec_rules
from keras_vit.models.frozen_spec import FrozenSpec, option


@dataclasses.dataclass(frozen=True)
class TextSpec(FrozenSpec):
    """A text tower: token ids to one vector per text (``keras_vit.models.text_tower``).

    The defaults are OpenAI CLIP ViT-B's text tower. Its blocks are the image tower's
    ``EncoderBlock``; what makes it a text tower is its input (``TextEmbedding``), the causal
    attention kind and the pooling at the end of text (``EndOfTextPooling``).

    >>> TextSpec(hidden_size=64, num_heads=2, mlp_dim=128, depth=1).head_dim
    32
    """

    vocabulary_size: int = option(49408, "token ids the tower embeds")
    context_length: int = option(77, "ids per text (the tokenizer pads or cuts to it)")
    hidden_size: int = option(512, "the tower's width")
    depth: int = option(12, "encoder blocks")
    num_heads: int = option(8, "attention heads")
    mlp_dim: int = option(2048, "the MLP's hidden width")
    causal: bool = option(True, "each token attends to itself and the ones before it (CLIP's); false: all (SigLIP's)")
    pooling: str = option("highest_id", "where the text's vector is read: highest_id, first_id (of end_id) or last")
    end_id: int | None = option(None, "pooling first_id: the end-of-text id it looks for")
    projection_dim: int | None = option(512, "the projection's width; none: the pooled vector as it is")
    projection_bias: bool = option(False, "a bias in the projection (SigLIP's head has one, CLIP's none)")
    layer_norm_epsilon: float = option(1e-5, "the norms' epsilon")
    final_norm_epsilon: float | None = option(
        None, "the final norm's epsilon where it is not the blocks' (keras-hub's CLIP: 1e-6); none: the same"
    )
    mlp_activation: str = option("quick_gelu", "the MLP's activation: gelu, quick_gelu (OpenAI CLIP's) or silu")
    gelu_approximate: bool = option(False, "gelu in its tanh form (SigLIP's), not the exact one")

    def __post_init__(self):
        spec_rules.check_text(self)

    @property
    def head_dim(self):
        return self.hidden_size // self.num_heads

    @property
    def width(self):
        """The width of the tower's output."""
        return self.projection_dim or self.hidden_size
