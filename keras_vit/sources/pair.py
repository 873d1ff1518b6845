"""The image-text model of a source that holds both towers (``ModelSource.text``): its image
tower as ``builder`` builds it, the text tower read from the same weights file by its table's
rows, the upstream's tokenizer from the repository's files, and the learned scale and bias."""

import os

import numpy as np

from keras_vit.checkpoints.readers import read_arrays
from keras_vit.checkpoints.tower_weights import assign_rows
from keras_vit.models.image_text import ImageTextModel
from keras_vit.models.text_tower import text_encoder
from keras_vit.presets import hub
from keras_vit.sources.description import InvalidModelFileError
from keras_vit.text.tokenizer import TextTokenizer

# The pair's own weights in the upstreams' files (transformers' and open_clip's alike).
SCALE_KEY, BIAS_KEY = "logit_scale", "logit_bias"


def build_pair(source, image_encoder, *, dtype=None, safe_mode=True):
    """The ``ImageTextModel`` of ``source`` around ``image_encoder`` (its image tower, built
    and loaded); the weights file is read again for the text tower, a pickle as safely as
    the image tower's (``safe_mode``)."""
    text = source.text
    path = source.weights.fetch()
    _, arrays = read_arrays(path, safe_mode=safe_mode)
    tower = text_encoder(text.spec, dtype=dtype)
    try:
        assign_rows(tower, text.rows, arrays, text.prefix)
    except ValueError as error:
        raise InvalidModelFileError(f"{path}: its text tower does not load: {error}") from None
    pair = ImageTextModel(image_encoder, tower, tokenizer(text.tokenizer), text.scoring, dtype=dtype)
    for variable, key in ((pair.logit_scale, SCALE_KEY), (pair.logit_bias, BIAS_KEY)):
        if variable is None:
            continue
        if text.prefix + key not in arrays:
            raise InvalidModelFileError(f"{path} has no {text.prefix + key!r}, the pair's learned {key[6:]}.")
        variable.assign(np.asarray(arrays[text.prefix + key], "float32").reshape(()))
    return pair


def tokenizer(location):
    """The ``TextTokenizer`` of a repository's files: a folder, or a hub name whose files are
    fetched (into the shared cache) as the tokenizer asks for them."""
    if hub.is_hub_name(location):
        return TextTokenizer.from_files(lambda name: hub.fetch(location, name, missing_ok=True), location)
    return TextTokenizer.from_folder(os.fspath(location))
