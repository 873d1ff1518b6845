"""What a model source is, once resolved: a ``ModelSource`` (its kind, spec, weights,
pre-processing and class names) and the ``Weights`` it points to. ``resolver`` makes them,
``builder`` builds from them."""

import dataclasses

from keras_vit.models.mae_spec import MAESpec
from keras_vit.models.spec import ViTSpec
from keras_vit.models.text_spec import TextSpec
from keras_vit.presets import hub

# The kinds of source (``ModelSource.kind``).
VARIANT = "variant"  # a named architecture of keras-vit (``vit_b16``): weights drawn at random
TIMM_ARCHITECTURE = "timm_architecture"  # one of timm's, by timm's name: weights drawn at random
PRESET = "preset"  # a published checkpoint, ``<model>.<tag>``
HUB = "hub"  # a repository on the Hugging Face hub, timm's or transformers', ``hf-hub:<org>/<name>``
TIMM_FOLDER = "timm_folder"  # a folder holding a timm repository's files
TRANSFORMERS_FOLDER = "transformers_folder"  # a folder of a transformers model (``save_pretrained``)
OPEN_CLIP_FOLDER = "open_clip_folder"  # a folder of open_clip's hub layout (``open_clip_config.json``)
KERAS_HUB_FOLDER = "keras_hub_folder"  # a folder keras-hub's ``save_to_preset`` wrote
LOCAL_PRESET = "local_preset"  # a folder written by ``keras_vit.save_preset``
KERAS_FILE = "keras_file"  # a ``.keras`` model file
CHECKPOINT = "checkpoint"  # a weights file (``.npz``, timm, HF, ``.weights.h5``) of a named architecture
URL = "url"  # a checkpoint to download, of a named architecture


class InvalidModelFileError(ValueError):
    """The given path is not a model file keras-vit can load (checked before any work)."""


class NoWeightsError(ValueError):
    """An architecture's name where pre-trained weights were asked for."""


@dataclasses.dataclass(frozen=True)
class Weights:
    """Where a model's weights are: a local file (``path``), a file to download once (``url``,
    with the publisher's ``sha256`` and ``size`` where known; see ``hub.fetch_url``) or a file of a
    hub repository (``hub_name``, ``filename``). ``container`` is the local file's format,
    as its first bytes say (``"keras"``, ``"keras_weights"``, ``"npz"``, ...); ``checkpoint``, the
    file as read (``loader.Checkpoint``) where describing it read it already, so that the
    builder does not read it again. ``fallback``: the hub repository's other weights file,
    read where it has no ``filename`` (open_clip's pickle, where it has no safetensors)."""

    path: str | None = None
    url: str | None = None
    sha256: str | None = None
    size: int | None = None
    hub_name: str | None = None
    filename: str | None = None
    container: str | None = None
    checkpoint: object = dataclasses.field(default=None, compare=False, repr=False)  # a reading, not a place
    fallback: str | None = None

    def fetch(self):
        """The local path of the weights file, downloaded (once, into the cache) if need be."""
        if self.path is not None:
            return self.path
        if self.hub_name is not None and self.fallback is not None:
            return hub.fetch(self.hub_name, self.filename, missing_ok=True) or hub.fetch(self.hub_name, self.fallback)
        if self.hub_name is not None:
            return hub.fetch(self.hub_name, self.filename)
        return hub.fetch_url(self.url, sha256=self.sha256, size=self.size)  # a hub file: the shared cache


@dataclasses.dataclass(frozen=True)
class TextTower:
    """The text half of an image-text source (CLIP, SigLIP): its weights are in the image
    tower's file, unless ``weights`` names another.

    Attributes:
        spec: the text tower's ``TextSpec``.
        rows: the table rows its weights are read by (``checkpoints.table``).
        tokenizer: where its tokenizer files are: a hub name or a folder; None: open_clip's
            built-in CLIP vocabulary.
        tokenizer_files: whose layout those files are in: ``"transformers"`` (a repository's
            or ``save_pretrained``'s) or ``"keras_hub"`` (a preset folder's ``tokenizer.json``
            and assets).
        scoring: how the pair scores (``ImageTextModel``'s ``"softmax"`` or ``"sigmoid"``).
        prefix: what the file's keys of the text tower start with.
        clean: the clean-up before the tokenizer's own (a name in
            ``keras_vit.text.cleaning.CLEANUPS``), where the model's library adds one
            (open_clip's); None: the tokenizer files' own alone.
        context_length: the ids per text, where the model's config says it rather than
            the tokenizer's files (open_clip's ``text_cfg``).
        weights: the file its weights (and the scale and bias) are in, where it is not the
            image tower's (``Weights``); None: the image tower's.
        head_prefix: what the keys of the pair's scale and bias start with (keras-hub's
            ``clip_head/``); the upstreams' files have them at the top.
    """

    spec: TextSpec
    rows: tuple
    tokenizer: str | None
    scoring: str
    prefix: str = ""
    clean: str | None = None
    context_length: int | None = None
    weights: Weights | None = None
    tokenizer_files: str = "transformers"
    head_prefix: str = ""


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What a model source names (``resolve``'s answer; ``keras_vit.sources.builder`` builds it).

    Attributes:
        kind: one of the kinds above (``PRESET``, ``HUB``, ``KERAS_FILE``, ...).
        given: the source as given.
        name: the model's name (the architecture's, or the preset's model); None for a
            file that holds its own architecture.
        spec: the ``ViTSpec`` to build, with the numerics its weights were trained with;
            None where the file holds its own architecture (``.keras``, a local preset) or
            a checkpoint was given without ``model_name``.
        weights: where the weights are (``Weights``); None: drawn at random.
        preprocessing: ``ImagePreprocessing`` arguments but the image size (the
            checkpoint's evaluation), or None.
        class_names: the class names of the checkpoint's classifier, or None.
        num_classes: how many classes those names (and the checkpoint's head) have.
        pretraining: the ``MAESpec`` of the masked autoencoder the weights are (its decoder,
            mask ratio and loss), or None.
        text: the text tower of an image-text source (``TextTower``), or None.
    """

    kind: str
    given: str
    name: str | None = None
    spec: ViTSpec | None = None
    weights: Weights | None = None
    preprocessing: dict | None = None
    class_names: tuple | None = None
    num_classes: int | None = None
    pretraining: MAESpec | None = None
    text: TextTower | None = None

    @property
    def holds_architecture(self):
        """Whether the source names its architecture itself (and so takes no ``model_name``)."""
        return self.kind in (PRESET, HUB, TIMM_FOLDER, TRANSFORMERS_FOLDER, OPEN_CLIP_FOLDER, LOCAL_PRESET, KERAS_FILE)
