"""The names some options take, as data with no backend: the layers, optimisers and recipes
that implement them, the spec that checks them and timm's architecture table (``keras-vit
presets`` counts what builds without importing Keras) read them here, and a command's
``--help`` its choices (a recipe's flags list them before any backend is imported)."""

NORM_TYPES = ("layernorm", "rmsnorm")  # layers/layer_norm.py
CROP_MODES = ("center", "squash")  # layers/preprocessing.py: a centre crop, or the whole image squashed
HEAD_FUSIONS = ("mean", "max", "min")  # inspect/attention.py: how attention rollout fuses a block's heads
MLP_ACTIVATIONS = ("gelu", "quick_gelu", "silu")  # layers/activations.py: the MLP's, by ViTSpec.mlp_activation
POOLINGS = ("token", "gap", "token_gap")  # layers/heads.py
# layers/text_pooling.py: where a text tower reads a text's vector: the first position of its
# highest id (OpenAI CLIP's end of text), of a given end-of-text id (transformers' CLIP where a
# config sets another), or the last position (SigLIP's, its texts padded to the context).
END_OF_TEXT_RULES = ("highest_id", "first_id", "last")
ATTENTION_POOLING = "map"  # layers/attention_pooling.py: the spec's pooling name, timm's global_pool
POSITION_TABLES = ("learned", "sincos2d")  # layers/tokens.py: what PositionEmbedding adds
# The spec's choices: "none" is a model without a table (one with rotary embeddings).
POSITION_EMBEDDINGS = (*POSITION_TABLES, "none")
# layers/rotary.py: each form and its layout, True for the interleaved pairs, False for the half-split ones.
ROPE_FORMS = {"dinov3": False, "axial": True, "mixed": True}
# Which coordinate's frequencies come first: the row's ("ij") or the column's ("xy").
GRID_INDEXINGS = ("ij", "xy")
# The forms whose frequencies are learned weights, one set per block and head.
LEARNED_FORMS = ("mixed",)
DECAYS = ("linear", "cosine")  # optimizers.py: the learning-rate schedule's decay after warmup
OPTIMIZERS = ("adam", "sgd")  # training/optimizers.py
DISTILLATIONS = ("hard", "soft")  # training/distillation.py: DeiT's two
# training/distribution.py: the strategies each backend runs.
STRATEGIES = {
    "tensorflow": ("default", "mirrored", "tpu"),
    "jax": ("default", "data_parallel", "model_parallel", "sharded"),
    "torch": ("default",),
}
