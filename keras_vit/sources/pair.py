"""The image-text model of a source that holds both towers (``ModelSource.text``): its image
tower as ``builder`` builds it, the text tower read by its table's rows (from the image
tower's weights file, or its own), the upstream's tokenizer from the repository's files, and
the learned scale and bias."""

import functools
import importlib.util
import os

import numpy as np

from keras_vit.checkpoints import keras_hub_config, keras_hub_text
from keras_vit.checkpoints.readers import read_arrays
from keras_vit.checkpoints.tower_weights import assign_rows
from keras_vit.models.image_text import ImageTextModel
from keras_vit.models.text_tower import text_encoder
from keras_vit.presets import hub
from keras_vit.sources.description import InvalidModelFileError
from keras_vit.text.tokenizer import TextTokenizer

# The pair's own weights in the upstreams' files (transformers' and open_clip's alike, at the
# top level whatever the text tower's prefix).
SCALE_KEY, BIAS_KEY = "logit_scale", "logit_bias"


def build_pair(source, image_encoder, *, dtype=None, safe_mode=True):
    """The ``ImageTextModel`` of ``source`` around ``image_encoder`` (its image tower, built
    and loaded); the text tower's weights file (the image tower's, read again, unless the
    text tower names its own) is read as safely as the image tower's (``safe_mode``)."""
    text = source.text
    path = (text.weights or source.weights).fetch()
    if keras_hub_config.is_preset_folder(path):
        arrays = keras_hub_config.read_weights(path)
    else:
        _, arrays = read_arrays(path, safe_mode=safe_mode)
    tower = text_encoder(text.spec, dtype=dtype)
    try:
        assign_rows(tower, text.rows, arrays, text.prefix)
    except ValueError as error:
        raise InvalidModelFileError(f"{path}: its text tower does not load: {error}") from None
    pair = ImageTextModel(image_encoder, tower, tokenizer(text), text.scoring, dtype=dtype)
    for variable, name in ((pair.logit_scale, SCALE_KEY), (pair.logit_bias, BIAS_KEY)):
        if variable is None:
            continue
        key = text.head_prefix + name
        if key not in arrays:
            raise InvalidModelFileError(f"{path} has no {key!r}, the pair's learned {name[6:]}.")
        variable.assign(np.asarray(arrays[key], "float32").reshape(()))
    return pair


def tokenizer(text):
    """The ``TextTokenizer`` of a ``TextTower``: its repository's files (a folder, or a hub
    name whose files are fetched into the shared cache as the tokenizer asks for them), or
    open_clip's built-in CLIP vocabulary."""
    options = dict(clean=text.clean, context_length=text.context_length)
    if text.tokenizer_files == "keras_hub":
        return keras_hub_text.tokenizer(text.tokenizer)
    if text.tokenizer is None:
        return TextTokenizer.open_clip(builtin_vocabulary(), text.context_length or 77, text.clean or "open_clip")
    if hub.is_hub_name(text.tokenizer):
        locate = functools.partial(hub.fetch, text.tokenizer, missing_ok=True)
        return TextTokenizer.from_files(locate, text.tokenizer, **options)
    return TextTokenizer.from_folder(text.tokenizer, **options)


# open_clip's built-in vocabulary: the file its package ships, where it is installed, else the
# same merges as OpenAI's CLIP repository on the hub holds them.
OPEN_CLIP_VOCABULARY = "bpe_simple_vocab_16e6.txt.gz"
CLIP_MERGES = ("hf-hub:openai/clip-vit-base-patch32", "merges.txt")


def builtin_vocabulary():
    """The path of open_clip's built-in CLIP vocabulary (its merges)."""
    package = importlib.util.find_spec("open_clip")
    if package is not None and package.origin:
        path = os.path.join(os.path.dirname(package.origin), OPEN_CLIP_VOCABULARY)
        if os.path.isfile(path):
            return path
    return hub.fetch(*CLIP_MERGES, hint=" (or install open_clip_torch, which ships the vocabulary)")
