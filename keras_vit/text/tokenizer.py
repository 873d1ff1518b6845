"""``TextTokenizer``: texts to the fixed-length ids a text tower takes, as its upstream makes
them (the clean-up, the start and end of text, truncation that keeps the end, the padding id).

Tokenizing runs in Python, outside the model's graph, with the library the upstream's files
are written for (``encoders``); the tower takes the ids.
"""

import json
import os

import numpy as np

from keras_vit.text import byte_level_bpe
from keras_vit.text.cleaning import CLEANUPS
from keras_vit.text.encoders import SentencePieceEncoder, TokenizersEncoder, encoder_from_config

# transformers' tokenizer files in a repository or a save_pretrained folder.
TOKENIZER_JSON, SPIECE = TokenizersEncoder.filename, SentencePieceEncoder.filename
VOCAB_JSON, MERGES_TXT = "vocab.json", "merges.txt"
TOKENIZER_CONFIG, SPECIAL_TOKENS = "tokenizer_config.json", "special_tokens_map.json"
# transformers' tokenizer classes that clean the text in Python first: SigLIP's canonical text.
_CANONICAL = {"SiglipTokenizer": "canonicalize"}
# transformers' tokenizer classes that pad on the left unless their config says otherwise.
_LEFT_PADDED = ("Siglip2Tokenizer",)
PADDINGS = ("right", "left")


class TextTokenizer:
    """Texts to ``(len(texts), context_length)`` int32 ids: ``start_id`` (where the upstream
    has one), the text's ids, ``end_id`` (where it has one), and ``pad_id`` to the context
    length, after them (or before them: ``padding="left"``). A longer text loses its last
    ids, never its end of text.

    Args:
        encoder: the upstream's tokenizer (``encoders``): cleaned texts to their ids.
        context_length: the ids per text.
        end_id, pad_id, start_id: the end of text (None: none, as SigLIP 2's Gemma
            tokenizer), the padding (open_clip's 0; transformers pads CLIP with its end of
            text, SigLIP with its ``</s>``), the start of text or None.
        clean: the upstream's clean-up before tokenizing, a name in ``cleaning.CLEANUPS``.
        padding: where the padding goes, ``"right"`` or ``"left"`` (transformers'
            ``padding_side``).
    """

    def __init__(self, encoder, context_length, *, end_id, pad_id, start_id=None, clean="none", padding="right"):
        if clean not in CLEANUPS:
            raise ValueError(f"clean must be one of {sorted(CLEANUPS)}; got {clean!r}.")
        if padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}; got {padding!r}.")
        specials = (end_id is not None) + (start_id is not None)
        if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length <= specials:
            raise ValueError(
                f"context_length must be an int above {specials} (the start and end of text); got {context_length!r}."
            )
        self.encoder, self.context_length, self.clean, self.padding = encoder, context_length, clean, padding
        self.start_id, self.end_id, self.pad_id = start_id, None if end_id is None else int(end_id), int(pad_id)

    def __call__(self, texts):
        texts = [texts] if isinstance(texts, str) else list(texts)
        wrong = [text for text in texts if not isinstance(text, str)]
        if wrong:
            raise TypeError(f"expected texts (str, or a list of them); got {type(wrong[0]).__name__} {wrong[0]!r}.")
        start = [] if self.start_id is None else [self.start_id]
        end = [] if self.end_id is None else [self.end_id]
        room = self.context_length - len(start) - len(end)
        ids = np.full((len(texts), self.context_length), self.pad_id, dtype="int32")
        for row, content in zip(ids, self.encoder.encode([CLEANUPS[self.clean](text) for text in texts])):
            whole = [*start, *content[:room], *end]
            if self.padding == "left":
                row[len(row) - len(whole) :] = whole
            else:
                row[: len(whole)] = whole
        return ids

    def get_config(self):
        return {
            "encoder": self.encoder.get_config(),
            "context_length": self.context_length,
            "start_id": self.start_id,
            "end_id": self.end_id,
            "pad_id": self.pad_id,
            "clean": self.clean,
            "padding": self.padding,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "encoder": encoder_from_config(config["encoder"])})

    @classmethod
    def open_clip(cls, merges_path, context_length=77, clean="open_clip"):
        """open_clip's CLIP tokenizer (``SimpleTokenizer``) from its merges file (its gzipped
        one, or a transformers ``merges.txt`` of the same vocabulary): ftfy and HTML
        clean-up, lower case (``clean``), padded with 0."""
        vocab, merges = byte_level_bpe.open_clip_vocabulary(merges_path)
        encoder = TokenizersEncoder(byte_level_bpe.clip_bpe(vocab, merges, byte_level_bpe.OPEN_CLIP_SPECIALS))
        start, end = (vocab[token] for token in byte_level_bpe.OPEN_CLIP_SPECIALS)
        return cls(encoder, context_length, start_id=start, end_id=end, pad_id=0, clean=clean)

    @classmethod
    def from_folder(cls, folder, **options):
        """The tokenizer of a transformers repository or ``save_pretrained`` folder:
        SigLIP's ``spiece.model``, a ``tokenizer.json``, or CLIP's ``vocab.json`` and
        ``merges.txt``, with the context length (``model_max_length``), padding and end of
        text its ``tokenizer_config.json`` names (``options``: ``from_files``')."""

        def locate(name):
            path = os.path.join(folder, name)
            return path if os.path.exists(path) else None

        return cls.from_files(locate, folder, **options)

    @classmethod
    def from_files(cls, locate, where, *, clean=None, context_length=None):
        """``from_folder`` of files found by ``locate(name)`` (a local path, or None where
        there is no such file), which may fetch each as it is asked for: only the files the
        tokenizer needs are. ``where`` names the files' place in messages. ``clean``: a
        clean-up a model's library applies before the tokenizer's own (open_clip's);
        ``context_length``: the model's, in place of the files' ``model_max_length``."""
        config = {**_read_json(locate(SPECIAL_TOKENS)), **_read_json(locate(TOKENIZER_CONFIG))}
        clean = _clean(clean, config, where)
        encoder, start, end = _encoder(locate, where, config)
        context_length = context_length or config.get("model_max_length")
        if not isinstance(context_length, int) or context_length > 1_000_000:  # transformers' "no limit" is 1e30
            raise ValueError(f"{where}: its {TOKENIZER_CONFIG} gives no model_max_length (the context length).")
        pad = _token(config.get("pad_token") or config.get("eos_token"))
        pad_id = None if pad is None else encoder.token_to_id(pad)
        if pad_id is None:
            raise ValueError(f"{where}'s tokenizer has no padding token {pad!r} in its vocabulary.")
        side = config.get("padding_side") or ("left" if config.get("tokenizer_class") in _LEFT_PADDED else "right")
        return cls(encoder, context_length, start_id=start, end_id=end, pad_id=pad_id, clean=clean, padding=side)


def _clean(before, config, where):
    """The clean-up of a tokenizer whose files are ``config``, after the clean-up ``before``
    (or None): one name of ``CLEANUPS``. A canonical text canonicalised again is the same."""
    own = _CANONICAL.get(config.get("tokenizer_class"), "none")
    if own != "none" and not config.get("do_lower_case", True):
        own = "canonicalize_cased"
    if before is None or own == "none" or before == own or before == "open_clip_canonicalize" and own == "canonicalize":
        return before or own
    raise ValueError(f"{where}: a clean-up {before!r} before the tokenizer's own {own!r} is not built.")


def _encoder(locate, where, config):
    """``(encoder, start id or None, end id)`` of the tokenizer files ``locate`` finds."""
    spiece = locate(SPIECE) if config.get("tokenizer_class") in _CANONICAL else None
    if spiece is not None:
        encoder = SentencePieceEncoder.from_file(spiece)
        return encoder, None, encoder.token_to_id(_token(config.get("eos_token")) or "</s>")
    tokenizer_json = locate(TOKENIZER_JSON)
    if tokenizer_json is not None:
        # The ids its own post-processor puts around a text: (start,) end, or none.
        encoder = TokenizersEncoder.from_file(tokenizer_json)
        *start, end = encoder.special_ids() or [None]
        return encoder, (start[0] if start else None), end
    vocabulary = locate(VOCAB_JSON), locate(MERGES_TXT)
    if None in vocabulary:
        raise FileNotFoundError(
            f"{where} holds no tokenizer: expected {TOKENIZER_JSON}, {SPIECE}, or {VOCAB_JSON} and {MERGES_TXT}."
        )
    encoder = TokenizersEncoder(byte_level_bpe.clip_bpe(*byte_level_bpe.read_vocabulary(*vocabulary)))
    *start, end = encoder.special_ids() or [encoder.token_to_id(_token(config.get("eos_token")))]
    return encoder, (start[0] if start else None), end


def _read_json(path):
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _token(entry):
    """A special token as the files write it: its text, or an ``AddedToken``'s record."""
    return entry.get("content") if isinstance(entry, dict) else entry
