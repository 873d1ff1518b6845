"""``TextTokenizer``: texts to the fixed-length ids a text tower takes, as its upstream makes
them (the clean-up, the start and end of text, truncation that keeps the end, the padding id).

Tokenizing runs in Python, outside the model's graph, with the library the upstream's files
are written for (``tokenizers``); the tower takes the ids.
"""

import json
import os

import numpy as np

from keras_vit.dependencies import require
from keras_vit.text import byte_level_bpe
from keras_vit.text.cleaning import CLEANUPS

# transformers' tokenizer files in a repository or a save_pretrained folder.
TOKENIZER_JSON, VOCAB_JSON, MERGES_TXT = "tokenizer.json", "vocab.json", "merges.txt"
TOKENIZER_CONFIG, SPECIAL_TOKENS = "tokenizer_config.json", "special_tokens_map.json"


class TextTokenizer:
    """Texts to ``(len(texts), context_length)`` int32 ids.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (its JSON text is what is saved), which adds
            the start and end of text itself.
        context_length: the ids per text: longer texts are cut, keeping their end-of-text
            id last; shorter ones padded.
        pad_id: the padding id (open_clip's 0; transformers' CLIP pads with its end of text).
        clean: the upstream's clean-up before tokenizing, a name in ``cleaning.CLEANUPS``.
    """

    def __init__(self, tokenizer, context_length, pad_id, clean="none"):
        if clean not in CLEANUPS:
            raise ValueError(f"clean must be one of {sorted(CLEANUPS)}; got {clean!r}.")
        if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 2:
            raise ValueError(
                f"context_length must be an int of at least 2 (start and end of text); got {context_length!r}."
            )
        self.tokenizer = tokenizer
        self.context_length, self.pad_id, self.clean = context_length, int(pad_id), clean
        tokenizer.enable_truncation(context_length)
        tokenizer.enable_padding(length=context_length, pad_id=self.pad_id)

    def __call__(self, texts):
        texts = [texts] if isinstance(texts, str) else list(texts)
        wrong = [text for text in texts if not isinstance(text, str)]
        if wrong:
            raise TypeError(f"expected texts (str, or a list of them); got {type(wrong[0]).__name__} {wrong[0]!r}.")
        cleaned = [CLEANUPS[self.clean](text) for text in texts]
        ids = [encoding.ids for encoding in self.tokenizer.encode_batch(cleaned)]
        return np.asarray(ids, dtype="int32").reshape(len(texts), self.context_length)

    @property
    def vocabulary_size(self):
        return self.tokenizer.get_vocab_size()

    def get_config(self):
        return {
            "tokenizer": self.tokenizer.to_str(),
            "context_length": self.context_length,
            "pad_id": self.pad_id,
            "clean": self.clean,
        }

    @classmethod
    def from_config(cls, config):
        tokenizers = require("tokenizers", "text")
        return cls(**{**config, "tokenizer": tokenizers.Tokenizer.from_str(config["tokenizer"])})

    @classmethod
    def open_clip(cls, merges_path, context_length=77):
        """open_clip's CLIP tokenizer (``SimpleTokenizer``) from its merges file: ftfy and
        HTML clean-up, lower case, padded with 0."""
        vocab, merges = byte_level_bpe.open_clip_vocabulary(merges_path)
        tokenizer = byte_level_bpe.clip_bpe(vocab, merges, byte_level_bpe.OPEN_CLIP_SPECIALS)
        return cls(tokenizer, context_length, pad_id=0, clean="open_clip")

    @classmethod
    def from_folder(cls, folder):
        """The tokenizer of a transformers repository or ``save_pretrained`` folder:
        ``tokenizer.json``, or CLIP's ``vocab.json`` and ``merges.txt``, with the context
        length (``model_max_length``) and padding token its ``tokenizer_config.json`` names."""
        tokenizers = require("tokenizers", "text")
        config = _read_json(os.path.join(folder, TOKENIZER_CONFIG))
        config = {**_read_json(os.path.join(folder, SPECIAL_TOKENS)), **config}
        if os.path.exists(os.path.join(folder, TOKENIZER_JSON)):
            tokenizer = tokenizers.Tokenizer.from_file(os.path.join(folder, TOKENIZER_JSON))
        elif all(os.path.exists(os.path.join(folder, name)) for name in (VOCAB_JSON, MERGES_TXT)):
            vocab, merges = byte_level_bpe.read_vocabulary(*(os.path.join(folder, n) for n in (VOCAB_JSON, MERGES_TXT)))
            tokenizer = byte_level_bpe.clip_bpe(vocab, merges)
        else:
            raise FileNotFoundError(
                f"{folder} holds no tokenizer: expected {TOKENIZER_JSON}, or {VOCAB_JSON} and {MERGES_TXT}."
            )
        context_length = config.get("model_max_length")
        if not isinstance(context_length, int) or context_length > 1_000_000:  # transformers' "no limit" is 1e30
            raise ValueError(
                f"{os.path.join(folder, TOKENIZER_CONFIG)} gives no model_max_length (the context length)."
            )
        pad = _token(config.get("pad_token") or config.get("eos_token"))
        pad_id = tokenizer.token_to_id(pad) if pad is not None else None
        if pad_id is None:
            raise ValueError(f"{folder}'s tokenizer has no padding token {pad!r} in its vocabulary.")
        return cls(tokenizer, context_length, pad_id)


def _read_json(path):
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _token(entry):
    """A special token as the files write it: its text, or an ``AddedToken``'s record."""
    return entry.get("content") if isinstance(entry, dict) else entry
