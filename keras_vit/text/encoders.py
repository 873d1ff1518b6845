"""The libraries upstream tokenizer files are written for, behind one small interface: the
content ids of cleaned texts (no start or end of text: ``TextTokenizer`` adds those), a
token's id, and a config to save, or a file (``save_file``, ``encoder_from_file``) where a
model keeps it beside its config (a ``.keras`` file's assets).

``tokenizers`` reads transformers' ``tokenizer.json`` (and runs CLIP's BPE built from a
vocabulary, ``byte_level_bpe``); ``sentencepiece`` reads a SentencePiece model
(``spiece.model``: SigLIP's).
"""

import base64
import os

from keras_vit.dependencies import require


class TokenizersEncoder:
    """A ``tokenizers.Tokenizer``: its normaliser, pre-tokenizer and model, without its own
    special tokens, truncation or padding."""

    kind, filename = "tokenizers", "tokenizer.json"  # the file: transformers' name for it

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

    @classmethod
    def from_file(cls, path):
        return cls(require("tokenizers", "text").Tokenizer.from_file(path))

    def get_config(self):
        return {"kind": self.kind, "tokenizer": self.tokenizer.to_str()}

    def save_file(self, folder):
        self.tokenizer.save(os.path.join(folder, self.filename))


class SentencePieceEncoder:
    """A SentencePiece model (its serialised bytes are what is saved)."""

    kind, filename = "sentencepiece", "spiece.model"  # the file: SigLIP's repositories' name for it

    def __init__(self, model):
        self.model = bytes(model)
        self.processor = require("sentencepiece", "text").SentencePieceProcessor(model_proto=self.model)

    def encode(self, texts):
        return self.processor.encode(list(texts))

    def token_to_id(self, token):
        found = self.processor.piece_to_id(token)
        return None if found == self.processor.unk_id() and token != self.processor.id_to_piece(found) else found

    @classmethod
    def from_file(cls, path):
        with open(path, "rb") as f:
            return cls(f.read())

    def get_config(self):
        return {"kind": self.kind, "model": base64.b64encode(self.model).decode("ascii")}

    def save_file(self, folder):
        with open(os.path.join(folder, self.filename), "wb") as f:
            f.write(self.model)


class SavedEncoder:
    """An encoder of ``kind`` whose file is still to be read (``encoder_from_file``): what a
    model's config names until Keras hands it the saved file's assets."""

    def __init__(self, kind):
        self.kind = kind

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise RuntimeError(f"the {self.kind} tokenizer's file is read with the model that saved it (its assets).")

    def get_config(self):
        return {"kind": self.kind}


_ENCODERS = {encoder.kind: encoder for encoder in (TokenizersEncoder, SentencePieceEncoder)}


def encoder_from_file(kind, folder):
    """The encoder of ``kind`` that ``save_file`` wrote into ``folder``."""
    encoder = _ENCODERS[kind]
    return encoder.from_file(os.path.join(folder, encoder.filename))


def encoder_from_config(config):
    """The encoder a ``get_config`` describes (its kind alone: a ``SavedEncoder``)."""
    if config.get("kind") in _ENCODERS and len(config) == 1:
        return SavedEncoder(config["kind"])
    if config["kind"] == "sentencepiece":
        return SentencePieceEncoder(base64.b64decode(config["model"]))
    if config["kind"] == "tokenizers":
        return TokenizersEncoder(require("tokenizers", "text").Tokenizer.from_str(config["tokenizer"]))
    raise ValueError(f"Unknown tokenizer kind {config['kind']!r}; expected 'tokenizers' or 'sentencepiece'.")
