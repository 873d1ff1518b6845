"""transformers' text towers (a ``CLIPModel``'s or ``SiglipModel``'s ``text_config``, or a
``CLIPTextConfig`` of its own) as ``TextSpec``s, with transformers' defaults for what a saved
config leaves out, and the table rows their weights are read by."""

from keras_vit.checkpoints.table import HF_CLIP_TEXT, HF_SIGLIP_TEXT
from keras_vit.checkpoints.transformers_config import ACTIVATIONS, UnsupportedModelTypeError
from keras_vit.models.text_spec import TextSpec

# transformers' defaults of each text config (CLIPTextConfig, SiglipTextConfig) for what a
# saved config leaves out, by these names, the rows its weights are read by and how the pair
# scores (``ImageTextModel``'s ``scoring``).
_DEFAULT_NAMES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "max_position_embeddings",
    "hidden_act",
    "layer_norm_eps",
)
_TEXT = {
    "clip": ((49408, 512, 2048, 12, 8, 77, "quick_gelu", 1e-5), HF_CLIP_TEXT, "softmax"),
    "siglip": ((32000, 768, 3072, 12, 12, 64, "gelu_pytorch_tanh", 1e-6), HF_SIGLIP_TEXT, "sigmoid"),
}
# The model types of a text tower saved alone, and the classes that write them.
TEXT_ONLY = {"clip_text_model": "CLIPTextModel", "siglip_text_model": "SiglipTextModel"}
# The TextSpec field each of the config's sizes fills.
_NAMES = dict(
    vocabulary_size="vocab_size",
    hidden_size="hidden_size",
    mlp_dim="intermediate_size",
    depth="num_hidden_layers",
    num_heads="num_attention_heads",
    context_length="max_position_embeddings",
    layer_norm_epsilon="layer_norm_eps",
)


def has_text_tower(config):
    """Whether a transformers ``config.json`` (a dict) is a pair's, with a text tower keras-vit builds."""
    return config.get("model_type") in _TEXT


def text_rows(model_type):
    """The table rows a ``model_type``'s text weights are read by."""
    return _TEXT[model_type][1]


def scoring(model_type):
    """How a ``model_type``'s pair scores: ``"softmax"`` (CLIP) or ``"sigmoid"`` (SigLIP)."""
    return _TEXT[model_type][2]


def text_spec(config):
    """The ``TextSpec`` of a transformers ``config.json`` (a dict) of ``model_type`` ``"clip"``
    or ``"siglip"``: its ``text_config``. CLIP's: causal attention, the end of text found by
    its ``eos_token_id`` (2, the configs written before transformers' fix: the highest id),
    the projection without a bias (``projection_dim``); SigLIP's: every token attended, the
    last position, the head with a bias (``projection_size``).

    >>> text_spec({"model_type": "siglip", "text_config": {"hidden_size": 64, "num_attention_heads": 2}}).pooling
    'last'
    """
    model_type = config.get("model_type")
    if model_type not in _TEXT:
        raise UnsupportedModelTypeError(f"keras-vit builds the text towers of {sorted(_TEXT)}; got {model_type!r}.")
    text = {**dict(zip(_DEFAULT_NAMES, _TEXT[model_type][0])), **(config.get("text_config") or {})}
    act = text["hidden_act"]
    if act not in ACTIVATIONS:
        raise UnsupportedModelTypeError(
            f"a {model_type} text tower with hidden_act={act!r}: keras-vit builds {sorted(ACTIVATIONS)}."
        )
    options = {field: text[name] for field, name in _NAMES.items()}
    options.update({"mlp_activation": "gelu", "gelu_approximate": False, **ACTIVATIONS[act]})
    if model_type == "siglip":
        projection = text.get("projection_size") or text["hidden_size"]
        return TextSpec(**options, causal=False, pooling="last", projection_dim=projection, projection_bias=True)
    end = text.get("eos_token_id", 49407)  # CLIPTextConfig's default
    pooling = dict(pooling="highest_id") if end == 2 else dict(pooling="first_id", end_id=int(end))
    return TextSpec(**options, **pooling, projection_dim=int(config.get("projection_dim", 512)))
