"""CLIP's byte-level BPE as a ``tokenizers`` pipeline, from a vocabulary and its merges: the
transformers layout (``vocab.json`` and ``merges.txt``) or open_clip's merges file
(``bpe_simple_vocab_16e6.txt.gz``), whose vocabulary the merges imply."""

import gzip
import json

from keras_vit.dependencies import require

# transformers' names of CLIP's start and end of text; open_clip's are below.
HF_SPECIALS = ("<|startoftext|>", "<|endoftext|>")
OPEN_CLIP_SPECIALS = ("<start_of_text>", "<end_of_text>")
# The words CLIP's BPE sees: the special tokens whole, English contractions, runs of letters,
# single digits, runs of anything else but spaces.
_WORDS = r"{specials}|'s|'t|'re|'ve|'m|'ll|'d|[\p{{L}}]+|[\p{{N}}]|[^\s\p{{L}}\p{{N}}]+"
# open_clip's merges file: a header line, then CLIP's merges (the vocabulary's size less
# its 256 bytes, their 256 word-final forms and the two special tokens).
_OPEN_CLIP_MERGES = 49152 - 256 - 2


def byte_alphabet():
    """``{byte: character}``: the 256 printable characters byte-level BPE writes bytes as,
    in the order CLIP's vocabulary lists them. The bytes that are printable Latin-1
    characters come first and stand for themselves; the others follow, in byte order, as the
    code points from 256 up.

    >>> alphabet = byte_alphabet()
    >>> alphabet[ord("a")], alphabet[ord(" ")], list(alphabet)[:2], len(set(alphabet.values()))
    ('a', 'Ġ', [33, 34], 256)
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}


def open_clip_vocabulary(path):
    """``(vocab, merges)`` of open_clip's gzipped merges file (or transformers' ``merges.txt``
    of the same vocabulary): the vocabulary open_clip builds from it (the bytes, their
    word-final forms, each merge's result, then its two special tokens), ids in that order."""
    opened = gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")
    with opened as f:  # its first line is a header, as transformers' merges.txt's
        lines = f.read().split("\n")[1 : _OPEN_CLIP_MERGES + 1]
    merges = [tuple(line.split()) for line in lines]
    alphabet = list(byte_alphabet().values())
    tokens = [*alphabet, *(c + "</w>" for c in alphabet), *("".join(m) for m in merges), *OPEN_CLIP_SPECIALS]
    return {token: i for i, token in enumerate(tokens)}, merges


def read_vocabulary(vocab_path, merges_path):
    """``(vocab, merges)`` of transformers' ``vocab.json`` and ``merges.txt``."""
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n") if line and not line.startswith("#version")]
    return vocab, merges


def clip_bpe(vocab, merges, specials=HF_SPECIALS):
    """CLIP's tokenizer as a ``tokenizers.Tokenizer``: NFC, whitespace collapsed and lower
    case; the text split into CLIP's words, each word's bytes merged by ``merges`` with its
    last piece marked ``</w>``; ``specials`` (start, end) around the ids."""
    tokenizers = require("tokenizers", "text")
    start, end = specials
    model = tokenizers.models.BPE(vocab=vocab, merges=merges, end_of_word_suffix="</w>", unk_token=end)
    tokenizer = tokenizers.Tokenizer(model)
    norm = tokenizers.normalizers
    tokenizer.normalizer = norm.Sequence([norm.NFC(), norm.Replace(tokenizers.Regex(r"\s+"), " "), norm.Lowercase()])
    words = _WORDS.format(specials="|".join(_escaped(s) for s in specials))
    pre = tokenizers.pre_tokenizers
    tokenizer.pre_tokenizer = pre.Sequence(
        [pre.Split(tokenizers.Regex(words), behavior="removed", invert=True), pre.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{start} $A {end}", special_tokens=[(start, vocab[start]), (end, vocab[end])]
    )
    tokenizer.add_special_tokens([start, end])
    return tokenizer


def _escaped(text):
    """``text`` matched literally by the regular expression (Oniguruma's: ``<`` stays bare)."""
    return "".join("\\" + c if c in "|()[]{}.*+?^$\\" else c for c in text)
