"""keras-hub's text towers: the ``CLIPTextEncoder`` and ``SigLIPTextEncoder`` of a preset
folder's ``CLIPBackbone`` or ``SigLIPBackbone`` as ``TextSpec``s, the rows their weights are
read by, how the pair scores, and the tokenizer its ``tokenizer.json`` and assets describe.

A folder holds a pair when its backbone has both towers and it holds the tokenizer
(``tokenizer.json``, as keras-hub's presets and a saved preprocessor write it); a backbone
saved alone is its image tower, as before.
"""

import os
import typing

from keras_vit.checkpoints.keras_hub_config import (
    ACTIVATIONS,
    CONFIG_FILE,
    PREPROCESSOR_FILE,
    UnsupportedKerasHubModelError,
    read_json,
)
from keras_vit.checkpoints.keras_hub_table import KERAS_HUB_CLIP_TEXT, KERAS_HUB_SIGLIP_TEXT
from keras_vit.models.text_spec import TextSpec

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_ASSETS = os.path.join("assets", "tokenizer")


class _Pair(typing.NamedTuple):
    """A two-tower backbone's text side: its text encoder's class, the rows, how the pair
    scores, the head's key prefix, and keras-hub's defaults for what a saved config leaves
    out (the context, the MLP's activation)."""

    encoder: str
    rows: list
    scoring: str
    head: str
    context: int
    activation: str


_PAIRS = {
    "CLIPBackbone": _Pair("CLIPTextEncoder", KERAS_HUB_CLIP_TEXT, "softmax", "clip_head/", 77, "quick_gelu"),
    "SigLIPBackbone": _Pair(
        "SigLIPTextEncoder", KERAS_HUB_SIGLIP_TEXT, "sigmoid", "siglip_head/", 64, "gelu_approximate"
    ),
}


def _backbone(folder):
    config = read_json(folder, CONFIG_FILE) or {}
    return str(config.get("registered_name", "")).removeprefix("keras_hub>"), config.get("config", {})


def has_pair(folder):
    """Whether a keras-hub preset folder holds both towers of a pair and their tokenizer."""
    name, _ = _backbone(folder)
    return name in _PAIRS and os.path.isfile(os.path.join(folder, TOKENIZER_FILE))


def pair_parts(folder):
    """``(TextSpec, rows, scoring, head prefix)`` of a pair folder's text tower (``has_pair``)."""
    name, config = _backbone(folder)
    pair = _PAIRS[name]
    encoder_class = pair.encoder
    encoder = config.get("text_encoder") or {}
    if str(encoder.get("registered_name", "")).removeprefix("keras_hub>") != encoder_class:
        raise UnsupportedKerasHubModelError(f"{folder}: a {name} whose text encoder is not a {encoder_class}.")
    text = encoder["config"]
    if text["embedding_dim"] != text["hidden_dim"]:
        raise UnsupportedKerasHubModelError(
            f"a {encoder_class} with embedding_dim {text['embedding_dim']} and hidden_dim {text['hidden_dim']}: "
            "keras-vit builds them equal."
        )
    act = text.get("intermediate_activation", pair.activation)
    if act not in ACTIVATIONS:
        raise UnsupportedKerasHubModelError(
            f"a {encoder_class} with intermediate_activation={act!r}: keras-vit builds {sorted(ACTIVATIONS)}."
        )
    options = dict(
        vocabulary_size=int(text["vocabulary_size"]),
        context_length=int(text.get("max_sequence_length", pair.context)),
        hidden_size=int(text["hidden_dim"]),
        depth=int(text["num_layers"]),
        num_heads=int(text["num_heads"]),
        mlp_dim=int(text["intermediate_dim"]),
        **ACTIVATIONS[act],
    )
    if name == "CLIPBackbone":
        # keras-hub's CLIP: the blocks' norms at 1e-5, the final one at 1e-6 (fixed in its layers).
        numerics = dict(layer_norm_epsilon=1e-5, final_norm_epsilon=1e-6)
        spec = TextSpec(**options, **numerics, pooling="highest_id", projection_dim=int(config["projection_dim"]))
    else:
        spec = TextSpec(
            **options,
            causal=False,
            pooling="last",
            projection_dim=int(text.get("projection_dim") or text["hidden_dim"]),
            projection_bias=True,
            layer_norm_epsilon=float(text.get("layer_norm_epsilon", 1e-6)),
        )
    return spec, pair.rows, pair.scoring, pair.head


def tokenizer(folder):
    """The ``TextTokenizer`` of a pair folder, as keras-hub's preprocessor tokenizes: CLIP's
    byte-level BPE (``vocabulary.json``, ``merges.txt``) lower-cased, between its start and
    end of text, padded with 0 (or the end of text: ``pad_with_end_token``); SigLIP's
    SentencePiece model (``vocabulary.spm``) on the canonical text, its end of text after,
    padded with it too; to the preprocessor's ``sequence_length``."""
    from keras_vit.text import byte_level_bpe
    from keras_vit.text.encoders import SentencePieceEncoder, TokenizersEncoder
    from keras_vit.text.tokenizer import TextTokenizer

    name, _ = _backbone(folder)
    settings = (read_json(folder, TOKENIZER_FILE) or {}).get("config", {})
    preprocessor = (read_json(folder, PREPROCESSOR_FILE) or {}).get("config", {})
    context = int(preprocessor.get("sequence_length") or _PAIRS[name].context)
    assets = os.path.join(folder, TOKENIZER_ASSETS)
    if name == "CLIPBackbone":
        vocab, merges = byte_level_bpe.read_vocabulary(
            os.path.join(assets, "vocabulary.json"), os.path.join(assets, "merges.txt")
        )
        start, end = (vocab[token] for token in byte_level_bpe.HF_SPECIALS)
        encoder = TokenizersEncoder(byte_level_bpe.clip_bpe(vocab, merges))
        pad = end if settings.get("pad_with_end_token") else 0
        return TextTokenizer(encoder, context, start_id=start, end_id=end, pad_id=pad)
    with open(os.path.join(assets, "vocabulary.spm"), "rb") as f:
        encoder = SentencePieceEncoder(f.read())
    end = encoder.token_to_id("</s>")
    clean = "canonicalize" if preprocessor.get("canonicalize_text", True) else "none"
    return TextTokenizer(encoder, context, end_id=end, pad_id=end, clean=clean)  # keras-hub pads SigLIP with </s>
