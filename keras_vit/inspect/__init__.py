"""Looking into models: what they cost (parameters, FLOPs) and what they learned (the
paper's section 4.5: attention maps and rollout, attention distance, position-embedding
similarity, embedding filters)."""

from keras_vit.inspect.attention import (
    attention_distance,
    attention_maps,
    attention_rollout,
    mean_attention_distance,
    overlay,
    rollout,
)
from keras_vit.inspect.cost import count_flops, count_parameters
from keras_vit.inspect.embeddings import (
    cosine_similarity_grid,
    embedding_filters,
    position_embedding_similarity,
    principal_components,
)

__all__ = [
    "attention_distance",
    "attention_maps",
    "attention_rollout",
    "cosine_similarity_grid",
    "count_flops",
    "count_parameters",
    "embedding_filters",
    "mean_attention_distance",
    "overlay",
    "position_embedding_similarity",
    "principal_components",
    "rollout",
]
