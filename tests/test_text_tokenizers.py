"""Text tokenizers: the ids each upstream gives, on strings that tell tokenizers apart.

The references are the upstreams' own code: open_clip's ``SimpleTokenizer`` with the real CLIP
vocabulary its package ships; transformers' ``CLIPTokenizer`` over that vocabulary, its
folder written by its own ``save_pretrained`` (``tokenizer.json``) or in the OpenAI hub
repositories' ``vocab.json`` and ``merges.txt`` layout; transformers' ``SiglipTokenizer``
over a SentencePiece model trained here, offline, on the manual's pages; open_clip's ids again
from OpenAI's hub repository's ``merges.txt``, where open_clip is not installed. Tokenizing is Python that no backend
computes: these tests run once (``backend_free``), open_clip's (which returns torch tensors)
in the torch process.
"""

import json
import os
import pathlib

import numpy as np
import pytest
from helpers import once_on, train_sentencepiece, write_clip_vocabulary

from keras_vit.text import TextTokenizer

pytestmark = pytest.mark.backend_free

# Capitals, punctuation, contractions, accents and other scripts, tabs and double spaces,
# HTML entities (open_clip unescapes them, transformers does not), mojibake (ftfy mends it),
# the special tokens' own text, text longer than the context, nothing at all.
HARD = [
    "A photo of a CAT.",
    "naïve café – Ünïcödé, ﬁne Straße İstanbul",
    "tabs\tand  double  spaces\n and a new line",
    "&amp; html &lt;b&gt; entities",
    "<i>tags</i> beside &amp;amp; an entity escaped twice",
    "don't you're we'll I'M",
    "numbers 12345 and 3.14",
    "emoji 🐱🐶 and 中文字符",
    "mojibake: cafÃ©",
    "<|endoftext|> and <end_of_text> in the text",
    "MiXeD-CaSe_under_score",
    "Ａｂｃ fullwidth",
    "a long caption " * 40,
    "",
    "   ",
]


@pytest.fixture(scope="module")
def clip_vocabulary(tmp_path_factory):
    """CLIP's vocabulary in the OpenAI hub repositories' layout (``vocab.json``, ``merges.txt``,
    ``tokenizer_config.json``), written from open_clip's."""
    folder = tmp_path_factory.mktemp("clip_vocab")
    write_clip_vocabulary(folder)
    config = {"model_max_length": 77, "pad_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def open_clip_tokenizer(clip_vocabulary):
    """open_clip's tokenizer module (imported beside the inert torchvision stand-in)."""
    from open_clip import tokenizer

    return tokenizer


@pytest.fixture(scope="module")
def merges_file(open_clip_tokenizer):
    return os.path.join(os.path.dirname(open_clip_tokenizer.__file__), "bpe_simple_vocab_16e6.txt.gz")


@pytest.fixture(scope="module")
def transformers_folder(clip_vocabulary, tmp_path_factory):
    """transformers' CLIP tokenizer as its ``save_pretrained`` writes it (``tokenizer.json``)."""
    from transformers import CLIPTokenizer

    folder = tmp_path_factory.mktemp("clip_tokenizer")
    CLIPTokenizer.from_pretrained(str(clip_vocabulary)).save_pretrained(str(folder))
    assert (folder / "tokenizer.json").exists()
    return folder


@pytest.fixture(scope="module")
def siglip_folder(tmp_path_factory):
    """transformers' SigLIP tokenizer as its ``save_pretrained`` writes it (``spiece.model``),
    over a small SentencePiece model trained on the README and the models page."""
    from transformers import SiglipTokenizer

    folder = tmp_path_factory.mktemp("siglip_tokenizer")
    model = train_sentencepiece(folder, 400, pages=("README.md", "docs/guide/models.md"))
    SiglipTokenizer(vocab_file=str(model)).save_pretrained(str(folder / "saved"))
    return folder / "saved"


def _transformers_ids(folder, texts):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    options = dict(padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="np")
    return tokenizer(texts, **options)["input_ids"]


@pytest.mark.backend_free(False)
@once_on("torch", "open_clip's tokenizer returns torch tensors; the ids are the same Python on every backend")
def test_open_clips_clip_tokenizer_gives_open_clips_ids(open_clip_tokenizer, merges_file):
    ours = TextTokenizer.open_clip(merges_file)
    expected = open_clip_tokenizer.SimpleTokenizer()(HARD).numpy()
    np.testing.assert_array_equal(ours(HARD), expected)
    assert ours(HARD).dtype == np.int32 and ours(HARD).shape == (len(HARD), 77)


@pytest.mark.backend_free(False)
@once_on("torch", "open_clip's tokenizer returns torch tensors; the ids are the same Python on every backend")
def test_without_open_clip_its_vocabulary_is_openai_clips_merges_from_the_hub(open_clip_tokenizer, mirror, monkeypatch):
    import types

    from keras_vit.sources import pair

    folder = pathlib.Path(mirror.root) / "openai" / "clip-vit-base-patch32" / "resolve" / "main"
    folder.mkdir(parents=True)
    write_clip_vocabulary(folder)
    no_open_clip = types.SimpleNamespace(util=types.SimpleNamespace(find_spec=lambda name: None))
    monkeypatch.setattr(pair, "importlib", no_open_clip)
    ours = TextTokenizer.open_clip(pair.builtin_vocabulary())
    np.testing.assert_array_equal(ours(HARD), open_clip_tokenizer.SimpleTokenizer()(HARD).numpy())


@pytest.mark.parametrize("layout", ["tokenizer.json", "vocab.json and merges.txt"])
def test_transformers_clip_tokenizer_gives_transformers_ids(layout, transformers_folder, clip_vocabulary):
    # The reference is transformers' tokenizer over that vocabulary, as it saved it.
    expected = _transformers_ids(transformers_folder, HARD)
    ours = TextTokenizer.from_folder(str(transformers_folder if layout == "tokenizer.json" else clip_vocabulary))
    np.testing.assert_array_equal(ours(HARD), expected)
    # transformers pads CLIP with its end of text, where open_clip pads with 0.
    assert ours.pad_id == 49407 and ours.context_length == 77


def test_siglips_tokenizer_gives_transformers_ids(siglip_folder):
    ours = TextTokenizer.from_folder(str(siglip_folder))
    np.testing.assert_array_equal(ours(HARD), _transformers_ids(siglip_folder, HARD))
    # SigLIP's own padding: to 64 ids with its </s>, which mteb and others got wrong.
    assert (ours.context_length, ours.pad_id, ours.end_id, ours.start_id) == (64, 1, 1, None)


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_a_tokenizer_saved_as_its_config_gives_the_same_ids(kind, transformers_folder, siglip_folder):
    tokenizer = TextTokenizer.from_folder(str({"clip": transformers_folder, "siglip": siglip_folder}[kind]))
    again = TextTokenizer.from_config(json.loads(json.dumps(tokenizer.get_config())))
    np.testing.assert_array_equal(again(HARD), tokenizer(HARD))


def test_one_text_is_a_batch_of_one_and_a_text_that_is_not_a_string_is_refused(transformers_folder):
    tokenizer = TextTokenizer.from_folder(str(transformers_folder))
    np.testing.assert_array_equal(tokenizer("a cat"), tokenizer(["a cat"]))
    with pytest.raises(TypeError, match=r"expected texts \(str, or a list of them\); got int 3"):
        tokenizer(["a cat", 3])


def test_a_folder_without_a_tokenizer_says_what_it_expected(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match="holds no tokenizer: expected tokenizer.json, spiece.model, or vocab.json and merges.txt",
    ):
        TextTokenizer.from_folder(str(tmp_path))
