"""The libraries upstream tokenizer files are written for, behind one small interface: the
content ids of cleaned texts (no start or end of text: ``TextTokenizer`` adds those), a
token's id, and a config to save.

``tokenizers`` reads transformers' ``tokenizer.json`` (and runs CLIP's BPE built from a
vocabulary, ``byte_level_bpe``); ``sentencepiece`` reads a SentencePiece model
(``spiece.model``: SigLIP's).
"""

import base64

from keras_vit.dependencies import require


class TokenizersEncoder:
    """A ``tokenizers.Tokenizer``: its normaliser, pre-tokenizer and model, without its own
    special tokens, truncation or padding."""

    def __init__(self, tokenizer):
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer

    def encode(self, texts):
        return [encoding.ids for encoding in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def special_ids(self):
        """The ids the tokenizer's own post-processor puts around an empty text."""
        return self.tokenizer.encode("").ids

    def token_to_id(self, token):
        return self.tokenizer.token_to_id(token)

    def get_config(self):
        return {"kind": "tokenizers", "tokenizer": self.tokenizer.to_str()}


class SentencePieceEncoder:
    """A SentencePiece model (its serialised bytes are what is saved)."""

    def __init__(self, model):
        self.model = bytes(model)
        self.processor = require("sentencepiece", "text").SentencePieceProcessor(model_proto=self.model)

    def encode(self, texts):
        return self.processor.encode(list(texts))

    def token_to_id(self, token):
        found = self.processor.piece_to_id(token)
        return None if found == self.processor.unk_id() and token != self.processor.id_to_piece(found) else found

    def get_config(self):
        return {"kind": "sentencepiece", "model": base64.b64encode(self.model).decode("ascii")}


def encoder_from_config(config):
    """The encoder a ``get_config`` describes."""
    if config["kind"] == "sentencepiece":
        return SentencePieceEncoder(base64.b64decode(config["model"]))
    if config["kind"] == "tokenizers":
        return TokenizersEncoder(require("tokenizers", "text").Tokenizer.from_str(config["tokenizer"]))
    raise ValueError(f"Unknown tokenizer kind {config['kind']!r}; expected 'tokenizers' or 'sentencepiece'.")
