"""The front door: ``create_model``, ``load_model``, ``save_model`` and ``list_models``.

Every way of naming a model (a variant, a preset, a timm architecture or hub name, a
folder, a ``.keras`` file, a checkpoint file or URL) goes through the same two steps:
``keras_vit.sources.resolver`` says what it names (a ``ModelSource``: spec, weights,
pre-processing, class names), and ``keras_vit.sources.builder`` makes the model and loads
its weights. The recipes' ``--init-from``, the commands and ``export_model`` come in here too.
"""

import fnmatch
import os

from keras_vit import atomic
from keras_vit.checkpoints import timm_config
from keras_vit.models import registry

# The resolver, the builder and what the layers above ask of a source, through the front door.
from keras_vit.presets import timm_names
from keras_vit.presets.catalog import list_presets
from keras_vit.sources import InvalidModelFileError, NoWeightsError, build, resolve  # noqa: F401
from keras_vit.sources.description import CHECKPOINT, KERAS_FILE  # noqa: F401
from keras_vit.sources.resolver import is_url  # noqa: F401


def list_models(pattern="*", pretrained=False):
    """Names accepted by ``create_model``, sorted, filtered by a shell-style pattern: the
    variants (``vit_b16``, the hybrids) and the architectures of timm's ViT family that
    keras-vit builds, by timm's names (``vit_small_patch14_reg4_dinov2``; their weights by
    hub name, ``"hf-hub:timm/<architecture>.<tag>"``).

    With ``pretrained=True``, the pretrained names: keras-vit's presets, published
    checkpoints named ``<model>.<tag>`` (``keras_vit.get_preset(name).card()`` describes one),
    and timm's (``<architecture>.<tag>``) of the architectures keras-vit builds, whose
    weights load from the hub.

    >>> list_models("vit_b[0-9]*")
    ['vit_b14', 'vit_b16', 'vit_b32', 'vit_b8']
    >>> list_models("vit_[bs]*reg4_dinov2")
    ['vit_base_patch14_reg4_dinov2', 'vit_small_patch14_reg4_dinov2']
    >>> list_models("vit_b16.*384", pretrained=True)
    ['vit_b16.augreg_in21k_ft_in1k_384', 'vit_b16.orig_in21k_ft_in1k_384']
    >>> list_models("*small*reg4_dinov2*", pretrained=True)
    ['vit_small_patch14_reg4_dinov2.lvd142m']
    """
    if pretrained:
        return sorted(list_presets(pattern) + timm_names.pretrained_names(pattern))
    family = [name for name in timm_config.buildable() if fnmatch.fnmatch(name, pattern)]
    return sorted(registry.list_models(pattern) + family)


def create_model(name, image_size=None, num_classes=None, *, weights=None, pretrained=None, dtype=None, **options):
    """Builds a named ViT or hybrid ResNet+ViT as a functional ``keras.Model``, optionally pretrained.

    Args:
        name: one of ``list_models()``: ``"vit_{ti,s,b,l,h}{8,14,16,32}"`` (size and patch)
            or a hybrid such as ``"r50_vit_b16"``; or a preset, ``"<model>.<tag>"`` from
            ``list_models(pretrained=True)`` (e.g. ``"vit_b16.augreg2_in21k_ft_in1k"``);
            or the path of a local preset folder (``keras_vit.save_preset``) or ``.keras`` file;
            or a timm model by timm's name, ``"<architecture>.<tag>"``
            (``"vit_base_patch16_224.augreg2_in21k_ft_in1k"``), or on the Hugging Face hub,
            ``"hf-hub:timm/<architecture>.<tag>"``, or in a folder holding one (timm's
            ``config.json`` and ``model.safetensors``): its architecture, weights,
            pre-processing and class names (``keras_vit.checkpoints.timm_config`` says which
            architectures build).
        image_size: input side or ``(height, width)``, divisible by the total stride
            (default: the variant's 224, or the preset's own). Pretrained position
            embeddings are resampled to it.
        num_classes: classifier outputs (default: the variant's 1000, or the preset's own);
            another count than the weights' keeps a fresh head, to fine-tune; 0, as in timm,
            no head: the model outputs its pooled features.
        pretrained: as timm's: None (what ``name`` says), True (an untagged timm
            architecture loads timm's default tag; a name without weights is an error) or
            False (the architecture alone, with the tag's classes and input size; nothing
            is fetched).
        weights: a preset tag of ``name`` (``"augreg2_in21k_ft_in1k"``), a checkpoint path
            or URL (the original ``.npz``, timm, HF or keras-vit files), or a timm model
            on the hub (``"hf-hub:timm/..."``) or in a folder, of ``name``'s size (its
            options, pre-processing and class names come with it). Downloads are cached
            (``KERAS_VIT_HOME``; ``KERAS_VIT_MIRROR`` and ``KERAS_VIT_OFFLINE`` as in
            ``keras_vit.presets.download``). The model gets the numerics the weights were
            trained with (their layout's), unless ``options`` say otherwise.
        dtype: the Keras dtype policy, e.g. ``"mixed_bfloat16"`` (default: the global one).
        **options: any field of ``ViTSpec`` (``pooling``, ``representation_size``,
            ``dropout_rate``, ``layer_norm_epsilon``, ``gelu_approximate``, ...), the
            hybrid's ResNet fields as ``resnet_<field>``, the model's ``name``,
            ``preprocessing`` or ``class_names``. Architecture fields may be overridden
            too, e.g. ``depth=2`` for a quick test.

    Examples:
        >>> model = create_model("vit_ti16", image_size=32, num_classes=10, depth=1)
        >>> model.output_shape
        (None, 10)
    """
    return build(resolve(name, weights, pretrained=pretrained), image_size, num_classes, dtype=dtype, **options)


def load_model(
    path, model_name=None, image_size=None, num_classes=None, safe_mode=True, *, tower=None, **model_options
):
    """Loads a model that holds its weights: a ``.keras`` file, a checkpoint with the
    architecture to build it into, a preset, a local preset folder, or a timm or
    transformers model by hub name or folder; an image-text model's (CLIP's, SigLIP's)
    two towers as one ``ImageTextModel``.

    Args:
        path: a ``.keras`` file written on any backend; a checkpoint that
            ``keras_vit.load_weights`` reads (original ``.npz``, timm, HF, ``.weights.h5``)
            or its URL, with ``model_name``; or what holds its own architecture: a preset
            (``"vit_b16.augreg2_in21k_ft_in1k"``), a local preset folder, a timm model by
            hub name (``"hf-hub:timm/<architecture>.<tag>"``) or folder, a transformers
            model by hub name or ``save_pretrained`` folder.
        model_name: the ``create_model`` name a checkpoint is built into (for a ``.keras``
            file only checked).
        image_size: build at this input size (int or ``(height, width)``; position
            embeddings are resampled); default: the model's own size, or 224 for a checkpoint.
        num_classes: classifier size when building from a checkpoint (default 1000).
        safe_mode: True (the default) refuses what could run code while loading (a
            ``Lambda`` layer's Python function, a PyTorch pickle holding more than
            tensors); False loads it: only for files you trust.
        tower: None (the default): what ``path`` holds, both towers of an image-text
            model (``keras_vit.models.ImageTextModel``: ``classify`` with labels,
            ``encode_texts``, ``encode_images``); ``"image"``: its image tower alone, as
            ``create_model`` builds it (the projection as its head); ``"pair"``: both towers,
            and an ``InvalidModelFileError`` for what holds an image model alone.
        **model_options: further ``create_model`` options (by default the model gets the
            numerics the checkpoint's layout was trained with, e.g. the exact GELU for timm
            weights).

    Returns:
        The model, not compiled.

    Raises:
        InvalidModelFileError (a ValueError): ``path`` is missing, a folder, truncated or
            not a model file; a checkpoint without ``model_name``; a checkpoint that would
            leave weights freshly initialised (e.g. a 1000-class head loaded into a 10-class
            model: give the checkpoint's own ``num_classes``, or build the model yourself and
            call ``keras_vit.load_weights`` to fine-tune); options that would change a
            ``.keras`` model that is not a keras-vit one.
        NoWeightsError (a ValueError): an architecture's name, which has no weights.
        ValueError: an unknown ``model_name`` (the message suggests close ones).

    Examples:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
        >>> create_model("vit_ti16", image_size=16, num_classes=3, depth=1).save(path)
        >>> load_model(path).input_shape
        (None, 16, 16, 3)
        >>> load_model(path, image_size=32).input_shape  # position embeddings resampled
        (None, 32, 32, 3)
    """
    source = resolve(path, model_name=model_name, loading=True)
    return build(source, image_size, num_classes, tower=tower, safe_mode=safe_mode, strict=True, **model_options)


def save_model(model, path, overwrite=True):
    """Saves ``model`` as a ``.keras`` file atomically: never a half-written model at ``path``.

    Missing folders are created. Returns ``path``.

    >>> import tempfile
    >>> model = create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    >>> folder = tempfile.mkdtemp()
    >>> _ = save_model(model, os.path.join(folder, "run", "model.keras"))
    >>> os.listdir(os.path.join(folder, "run"))
    ['model.keras']
    """
    path = os.fspath(path)
    if not path.endswith(".keras"):
        raise ValueError(f"Expected a path ending in .keras (the Keras model file format); got {path}.")
    with atomic.atomic_path(path, overwrite) as staged:
        model.save(staged)
    return path
