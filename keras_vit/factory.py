"""The front door: ``create_model``, ``load_model`` and ``list_models`` for every source of a model.

``create_model``'s ``name`` and ``weights`` are resolved (``resolve``) into a named
architecture (``keras_vit.models``, weights drawn at random), a preset (``keras_vit.presets``:
its record and published file), a local preset folder or ``.keras`` file (which holds its
own architecture), or a checkpoint path or URL to load into a named architecture.

Whatever the source, the model is built with the numerics its weights were trained with (a
preset's record, or the file's layout), then ``load_weights`` fills it: position embeddings
resampled for another image size, a fresh head for another class count. A preset also gives
the model its pre-processing and class names; a local preset or a ``.keras`` file has its own.

This module joins ``models``, ``checkpoints`` and ``presets`` from above; none of them
imports it.
"""

import fnmatch
import functools
import json
import os

from keras_vit import saving
from keras_vit.checkpoints import load_weights, timm_config
from keras_vit.checkpoints.loader import trained_numerics
from keras_vit.checkpoints.timm_architectures import ARCHITECTURES
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models import registry
from keras_vit.models.deferred_init import deferred_initialization, initialize_unloaded
from keras_vit.models.spec import ViTSpec
from keras_vit.models.variants import VARIANTS
from keras_vit.models.vit import VisionTransformer
from keras_vit.presets import download, hub, local
from keras_vit.presets.catalog import PRESETS, get_preset, list_presets

# What a weights path ends in (the readers' containers), to tell a missing file from a tag.
CHECKPOINT_EXTENSIONS = (".npz", ".pth", ".pt", ".bin", ".safetensors", ".keras", ".h5")


def list_models(pattern="*", pretrained=False):
    """Names accepted by ``create_model``, sorted, filtered by a shell-style pattern: the
    variants (``vit_b16``, the hybrids) and the architectures of timm's ViT family that
    keras-vit builds, by timm's names (``vit_small_patch14_reg4_dinov2``; their weights by
    hub name, ``"hf-hub:timm/<architecture>.<tag>"``).

    With ``pretrained=True``, the presets: published checkpoints named ``<model>.<tag>``
    (``keras_vit.get_preset(name).card()`` describes one).

    >>> list_models("vit_b[0-9]*")
    ['vit_b14', 'vit_b16', 'vit_b32', 'vit_b8']
    >>> list_models("vit_[bs]*reg4_dinov2")
    ['vit_base_patch14_reg4_dinov2', 'vit_small_patch14_reg4_dinov2']
    >>> list_models("vit_b16.*384", pretrained=True)
    ['vit_b16.augreg_in21k_ft_in1k_384', 'vit_b16.orig_in21k_ft_in1k_384']
    """
    if pretrained:
        return list_presets(pattern)
    family = [name for name in timm_config.buildable() if fnmatch.fnmatch(name, pattern)]
    return sorted(registry.list_models(pattern) + family)


def create_model(name, image_size=None, num_classes=None, *, weights=None, dtype=None, **options):
    """Builds a named ViT or hybrid ResNet+ViT as a functional ``keras.Model``, optionally pretrained.

    Args:
        name: one of ``list_models()``: ``"vit_{ti,s,b,l,h}{8,14,16,32}"`` (size and patch)
            or a hybrid such as ``"r50_vit_b16"``; or a preset, ``"<model>.<tag>"`` from
            ``list_models(pretrained=True)`` (e.g. ``"vit_b16.augreg2_in21k_ft_in1k"``);
            or the path of a local preset folder (``keras_vit.save_preset``) or ``.keras`` file;
            or a timm model on the Hugging Face hub, ``"hf-hub:timm/<architecture>.<tag>"``
            (e.g. ``"hf-hub:timm/vit_small_patch14_reg4_dinov2.lvd142m"``), or a folder
            holding one (timm's ``config.json`` and ``model.safetensors``): its
            architecture, weights, pre-processing and class names
            (``keras_vit.checkpoints.timm_config`` says which architectures build).
        image_size: input side or ``(height, width)``, divisible by the total stride
            (default: the variant's 224, or the preset's own). Pretrained position
            embeddings are resampled to it.
        num_classes: classifier outputs (default: the variant's 1000, or the preset's own);
            another count than the weights' keeps a fresh head, to fine-tune.
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
    if hub.is_hub_name(name) or is_timm_folder(name):
        if weights is not None:
            raise ValueError(f"{name!r} holds its own weights; weights={weights!r} would be a second source.")
        return _timm_model(name, image_size, num_classes, dtype, options)
    if hub.is_hub_name(weights) or is_timm_folder(weights):
        if name not in VARIANTS:
            raise ValueError(
                f"weights={weights!r} is a timm model: expected a model name of its size for name "
                f"(one of list_models()), or the timm model as name alone; got name={name!r}."
            )
        return _timm_model(weights, image_size, num_classes, dtype, {"name": name, **options}, sized_as=name)
    if isinstance(name, str) and name in ARCHITECTURES and name not in VARIANTS:
        return _timm_architecture(name, weights, image_size, num_classes, dtype, options)
    model_name, source = resolve(name, weights)
    if source is None:
        return registry.create_model(name, image_size, num_classes, dtype=dtype, **options)
    own, task = _own_and_task(options, image_size, num_classes)
    options.update(task)
    if isinstance(source, str) and (os.path.isdir(source) or source.endswith(".keras")):
        return local.load(source, dtype=dtype, **own, **options)
    own = {"name": model_name, **own}
    if isinstance(source, str):  # a checkpoint file or URL: its layout says how it was trained
        path = download.download(source) if is_url(source) else source
        spec = registry.get_spec(model_name)
        spec = spec.replace(**{**trained_numerics(path, spec.resnet is not None), **options})
        return _built_and_loaded(spec, dtype, own, path)
    spec = source.spec.replace(**options)  # bad options fail before any download
    path = download.download(source.url, sha256=source.sha256, size=source.size)
    own.setdefault("preprocessing", ImagePreprocessing(spec.image_size, **source.preprocessing))
    own.setdefault("class_names", source.labels if spec.num_classes == source.num_classes else None)
    return _built_and_loaded(spec, dtype, own, path)


def load_model(path, model_name=None, image_size=None, num_classes=None, safe_mode=True, **model_options):
    """``keras_vit.saving.load_model`` (a ``.keras`` file, or ``model_name`` with a
    checkpoint: the arguments are its), and what holds its own architecture by name, which
    ``create_model`` builds: a preset (``"vit_b16.augreg2_in21k_ft_in1k"``), a timm model by
    its hub name (``"hf-hub:timm/<architecture>.<tag>"``) or folder.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
    >>> create_model("vit_ti16", image_size=16, num_classes=3, depth=1).save(path)
    >>> load_model(path).output_shape
    (None, 3)
    """
    if hub.is_hub_name(path) or is_timm_folder(path) or (isinstance(path, str) and path in PRESETS):
        if model_name is not None:
            raise ValueError(f"{path!r} holds its own architecture; model_name={model_name!r} would be a second one.")
        return create_model(path, image_size, num_classes, **model_options)
    return saving.load_model(path, model_name, image_size, num_classes, safe_mode, **model_options)


def is_url(value):
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def resolve(name, weights):
    """``(model name or None, source)`` from ``create_model``'s ``name`` and ``weights``.

    ``source`` is a ``Preset``, a local path (a local preset folder, a ``.keras`` file or
    a checkpoint), a URL, or None (random weights). The model name is None when the
    source holds its own architecture (a local preset, a ``.keras`` file).
    """
    name = os.fspath(name) if isinstance(name, os.PathLike) else name
    weights = os.fspath(weights) if isinstance(weights, os.PathLike) else weights
    named = name in VARIANTS or name in PRESETS  # a name wins over a folder that happens to share it
    if isinstance(name, str) and not named and (os.path.isdir(name) or name.endswith(".keras")):
        if weights is not None:
            raise ValueError(f"{name!r} holds its own weights; weights={weights!r} would be a second source.")
        return None, name
    if isinstance(name, str) and "." in name:
        if weights is not None:
            raise ValueError(
                f"{name!r} is a preset, which names its weights; weights={weights!r} would be a second source. "
                f"Use create_model({name.split('.')[0]!r}, weights=...) to load other weights."
            )
        preset = get_preset(name)
        return preset.model, preset
    if weights is None or is_url(weights) or os.path.exists(weights):
        return name, weights
    looks_like_a_file = os.sep in weights or os.path.splitext(weights)[1] in CHECKPOINT_EXTENSIONS
    if looks_like_a_file:
        raise FileNotFoundError(f"weights={weights!r}: no such file or folder.")
    full = weights if "." in weights else f"{name}.{weights}"
    preset = get_preset(full)
    if preset.model != name:
        raise ValueError(f"The preset {full!r} holds {preset.model!r} weights, not {name!r}.")
    return name, preset


def is_timm_folder(path):
    """Whether ``path`` is a folder of a timm model as its hub repositories hold one: a
    ``config.json`` naming an ``architecture`` beside a ``model.safetensors``."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return False
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config) or os.path.isfile(os.path.join(path, local.PRESET_FILE)):
        return False
    try:
        with open(config, encoding="utf-8") as f:
            return "architecture" in json.load(f)
    except (OSError, ValueError):
        return False


# What makes a model name's size: a timm model's must match it to load as that name.
_SIZE = ("patch_size", "hidden_size", "depth", "num_heads", "mlp_dim")


def _timm_model(name, image_size, num_classes, dtype, options, sized_as=None):
    """A timm hub repository's (or a folder's) model: spec, weights, pre-processing, labels;
    with ``sized_as``, a model name whose size it must have."""

    def local(filename):
        path = os.path.join(os.fspath(name), filename)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{name}: a timm folder holds config.json and model.safetensors; {path} is missing."
            )
        return path

    fetch = functools.partial(hub.fetch, name) if hub.is_hub_name(name) else local
    with open(fetch("config.json"), encoding="utf-8") as f:
        config = json.load(f)
    spec_options, _, preprocessing, class_names = timm_config.from_hub_config(config)
    if sized_as is not None:
        named = registry.get_spec(sized_as)
        differ = [
            f"{k} {spec_options[k]} (not {getattr(named, k)})" for k in _SIZE if spec_options[k] != getattr(named, k)
        ]
        if differ:
            raise ValueError(
                f"{name} holds a {config['architecture']} of another size than {sized_as}: {', '.join(differ)}. "
                f"Expected {sized_as}'s size; or create_model({str(name)!r}) builds it as it is."
            )
    own, task = _own_and_task(options, image_size, num_classes)
    spec = ViTSpec(**spec_options).replace(**{**task, **options})
    own.setdefault("name", config["architecture"])
    own.setdefault("preprocessing", ImagePreprocessing(spec.image_size, **preprocessing))
    own.setdefault("class_names", class_names if spec.num_classes == spec_options["num_classes"] else None)
    return _built_and_loaded(spec, dtype, own, fetch("model.safetensors"))  # bad options failed before it


def _timm_architecture(name, weights, image_size, num_classes, dtype, options):
    """timm's architecture ``name`` with random weights, as ``timm.create_model(name)`` builds it."""
    if weights is not None:
        raise ValueError(
            f"{name!r} is a timm architecture: its pretrained weights load by hub name, "
            f"create_model('hf-hub:timm/{name}.<tag>'); got weights={weights!r}."
        )
    reason = timm_config.support(name)
    if reason is not None:
        raise ValueError(f"{name!r}: {reason}")
    spec = ViTSpec(**timm_config.spec_options(timm_config.architecture_args(name)))
    own, task = _own_and_task(options, image_size, num_classes)
    return VisionTransformer(spec.replace(**task, **options), dtype=dtype, **{"name": name, **own})


def _own_and_task(options, image_size, num_classes):
    """``options`` split: the model's own arguments (popped from it) and the task's sizes given."""
    own = {k: options.pop(k) for k in registry.MODEL_ARGUMENTS if k in options}
    task = {k: v for k, v in dict(image_size=image_size, num_classes=num_classes).items() if v is not None}
    return own, task


def _built_and_loaded(spec, dtype, own, path):
    """The model with ``path``'s weights; only what the file lacks is drawn at random."""
    with deferred_initialization():
        model = VisionTransformer(spec, dtype=dtype, **own)
    report = load_weights(model, path)
    initialize_unloaded(model, report.loaded)
    return model
