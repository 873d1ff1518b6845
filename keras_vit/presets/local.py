"""Local presets: a model saved with its spec, pre-processing and class names, as a folder.

A team shares its own fine-tuned models the way published ones are used:
``keras_vit.save_preset(model, "presets/flowers_vit_s16")`` writes the folder, and
``keras_vit.create_model("presets/flowers_vit_s16")`` (or with ``image_size=`` /
``num_classes=`` to adapt it) loads it on any backend. The folder holds ``model.keras``
(weights, spec, pre-processing and class names) and ``preset.json``: a card with the
file's size and SHA-256, checked on every load, so a changed or truncated model is refused.
The file is read whole for that only when it changed since it was last hashed: a hidden
stamp beside it keeps the hash with the file's size and time (``integrity``).
"""

import json
import os

import keras

from keras_vit.atomic import StagedWrites
from keras_vit.internals import set_untracked
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models.vit import VisionTransformer
from keras_vit.presets import integrity
from keras_vit.version import __version__

PRESET_FILE = "preset.json"
MODEL_FILE = "model.keras"
FORMAT = "keras_vit.preset"


def is_preset_folder(path):
    """Whether ``path`` is a folder ``save_preset`` wrote (it holds the card)."""
    return os.path.isfile(os.path.join(path, PRESET_FILE))


def _file_facts(path):
    """What the card records of a file, and what loading checks against it."""
    return {"size": os.path.getsize(path), "sha256": integrity.sha256(path)}


def save_preset(model, path, *, description="", overwrite=False, normalization="vit"):
    """Writes ``model`` as a local preset folder at ``path``, atomically; returns ``path``.

    Args:
        model: a ``keras_vit.VisionTransformer`` (its pre-processing and class names are
            kept: give it them when you build it, as the recipes do).
        path: the folder to write; it must not exist unless ``overwrite``.
        normalization: for a model without pre-processing, the recipes' normalisation its
            inputs were scaled with (``"vit"``: ``x / 127.5 - 1``, ``"imagenet"`` or None),
            stored as ``ImagePreprocessing.from_normalization(normalization, image_size)``
            so that every command can feed the preset raw images. A model with its own
            pre-processing keeps it.
        description: a line for the card (dataset, accuracy, licence, ...).
        overwrite: replace an existing folder (the old one stays until the new one is
            complete).

    Examples:
        >>> import os, tempfile, keras_vit
        >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1,
        ...                                class_names=["cat", "dog"])
        >>> folder = keras_vit.save_preset(model, os.path.join(tempfile.mkdtemp(), "pets"))
        >>> sorted(os.listdir(folder))  # and the model file's hash stamp (see read_card)
        ['.model.keras.stamp', 'model.keras', 'preset.json']
        >>> keras_vit.create_model(folder).class_names
        ('cat', 'dog')
    """
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"Expected a keras_vit.VisionTransformer; got a {type(model).__name__}.")
    path = os.fspath(path)
    own = model.preprocessing
    preprocessing = own or ImagePreprocessing.from_normalization(normalization, model.spec.image_size)
    with StagedWrites({"preset": path}, overwrite=overwrite) as staging:
        staged = staging.paths["preset"]
        os.makedirs(staged)
        model_path = os.path.join(staged, MODEL_FILE)
        # The model's file carries its pre-processing: lent to the model for the save only.
        set_untracked(model, "_preprocessing", preprocessing)
        try:
            model.save(model_path)
        finally:
            set_untracked(model, "_preprocessing", own)
        card = {
            "format": FORMAT,
            "version": 1,
            "name": os.path.basename(os.path.abspath(path)),
            "description": description,
            "model": model.name,
            "spec": model.spec.to_config(),
            "preprocessing": preprocessing.get_config(),
            "num_classes": model.spec.num_classes,
            "has_class_names": model.class_names is not None,
            "files": {MODEL_FILE: _file_facts(model_path)},
            "keras_vit_version": __version__,
            "keras_version": keras.__version__,
            "saved_on_backend": keras.backend.backend(),
        }
        with open(os.path.join(staged, PRESET_FILE), "w") as f:
            json.dump(card, f, indent=1)
        staging.commit()
    return path


def read_card(path, rehash=False):
    """The ``preset.json`` of a local preset folder, its model file checked against it: its
    size, and its SHA-256, read from its stamp while the file keeps the size and time it was
    hashed with (``rehash=True`` reads the file whole regardless)."""
    card_path = os.path.join(path, PRESET_FILE)
    if not os.path.isfile(card_path):
        raise ValueError(
            f"{path} is not a keras-vit preset folder: expected {PRESET_FILE} and {MODEL_FILE} in it "
            "(keras_vit.save_preset writes them)."
        )
    with open(card_path) as f:
        card = json.load(f)
    if card.get("format") != FORMAT:
        raise ValueError(f"{card_path} is not a keras-vit preset card (format {card.get('format')!r}).")
    model_path = os.path.join(path, MODEL_FILE)
    expected = card["files"][MODEL_FILE]
    if not os.path.isfile(model_path):
        raise ValueError(f"The preset {path} has no {MODEL_FILE}.")
    actual = {"size": os.path.getsize(model_path)}
    if actual["size"] == expected["size"]:  # else no need to read it
        actual["sha256"] = integrity.sha256(model_path, rehash=rehash)
    if actual != {k: expected[k] for k in actual}:
        raise ValueError(
            f"{model_path} does not match its card ({PRESET_FILE}): expected {expected}, found {actual}; "
            "it was changed or is incomplete. Save the preset again."
        )
    return card
