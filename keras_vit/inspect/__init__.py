"""Looking into models: what they cost (parameters, FLOPs) and what they learned (the
paper's section 4.5: attention maps and rollout, attention distance, position-embedding
similarity, embedding filters)."""

import typing

from keras_vit.lazy import exports

if typing.TYPE_CHECKING:  # the names as type checkers and the API reference read them
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

# Imported on first use (``keras_vit.lazy``): ``keras-vit inspect --help`` reads the head
# fusions alone (``keras_vit.inspect.fusions``), with no backend.
_DEFINED_IN = {
    **dict.fromkeys(
        ("attention_distance", "attention_maps", "attention_rollout", "mean_attention_distance", "overlay", "rollout"),
        "keras_vit.inspect.attention",
    ),
    **dict.fromkeys(("count_flops", "count_parameters"), "keras_vit.inspect.cost"),
    **dict.fromkeys(
        ("cosine_similarity_grid", "embedding_filters", "position_embedding_similarity", "principal_components"),
        "keras_vit.inspect.embeddings",
    ),
}
__all__ = sorted(_DEFINED_IN)
__getattr__, __dir__ = exports(__name__, _DEFINED_IN)
