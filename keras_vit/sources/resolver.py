"""What a model source names: the one place where a string, folder, file or URL is understood.

``resolve(source, weights=None, model_name=None, loading=False)`` turns any way of naming a
model into a ``ModelSource``: what it is (``kind``), its spec with the numerics its weights
were trained with, where those weights are (``Weights``: a local file, a download, a hub
file), its pre-processing and its class names. ``keras_vit.sources.builder`` makes the model
from that description. Nothing else in keras-vit inspects a string or a folder to decide
what it names.

The kinds are the entries of ``ENTRIES``, tried in order: the first whose test holds
describes the source. A new kind of source is one more entry (a test, a describe function)
and its tests.

Resolving reads what it must to know the spec (a hub repository's ``config.json``, a local
preset's card, a checkpoint's layout); a preset's or a hub repository's weights file is
fetched only when the model is built, after the options were checked.
"""

import dataclasses
import difflib
import os

from keras_vit.checkpoints import keras_hub_config, keras_hub_text, timm_config
from keras_vit.checkpoints.loader import read_checkpoint, trained_numerics
from keras_vit.checkpoints.readers import sniff_container
from keras_vit.checkpoints.timm_architectures import ARCHITECTURES
from keras_vit.checkpoints.timm_pretrained import default_tag
from keras_vit.models import registry
from keras_vit.models.spec import ViTSpec
from keras_vit.models.variants import VARIANTS
from keras_vit.presets import hub, local, timm_names
from keras_vit.presets.catalog import PRESETS, get_preset, list_presets
from keras_vit.sources.description import (
    CHECKPOINT,
    HUB,
    KERAS_FILE,
    KERAS_HUB_FOLDER,
    LOCAL_PRESET,
    PRESET,
    TIMM_ARCHITECTURE,
    URL,
    VARIANT,
    InvalidModelFileError,
    ModelSource,
    NoWeightsError,
    TextTower,
    Weights,
)
from keras_vit.sources.repository import is_repository_folder, repository_source

# What a weights path ends in (the readers' containers), to tell a missing file from a tag.
CHECKPOINT_EXTENSIONS = (".npz", ".pth", ".pt", ".bin", ".safetensors", ".keras", ".h5")


def resolve(source, weights=None, model_name=None, *, loading=False, pretrained=None):
    """What ``source`` (with ``create_model``'s ``weights`` or ``load_model``'s ``model_name``) names.

    Args:
        source: a name (a variant, a timm architecture, a preset ``<model>.<tag>``, a hub
            name ``hf-hub:<org>/<name>[@<revision>]``, timm's or transformers'), a folder (a
            local preset, a hub repository's files as ``save_for_hf`` or ``save_pretrained``
            write them), a file (``.keras``, a checkpoint) or a checkpoint's URL.
        weights: ``create_model``'s: a preset tag of ``source``, a checkpoint path or URL,
            or a hub model (name or folder) of ``source``'s size.
        model_name: ``load_model``'s: the architecture a checkpoint is built into (for a
            ``.keras`` file only checked).
        loading: the source must hold weights (``load_model``, ``--init-from``): an
            architecture's name alone is a ``NoWeightsError``, and anything that is not a
            model file an ``InvalidModelFileError``.
        pretrained: timm's argument. None: what the name says (a tagged name, its weights;
            an architecture, none). True: an untagged timm architecture takes timm's default
            tag; a name without weights is a ``NoWeightsError``. False: the architecture
            alone, as the tag builds it (its classes and input size), nothing fetched.

    Returns:
        A ``ModelSource``.

    >>> resolve("vit_b16").kind, resolve("vit_b16").weights is None
    ('variant', True)
    >>> source = resolve("vit_b16.augreg2_in21k_ft_in1k")
    >>> source.kind, source.name, source.spec.image_size
    ('preset', 'vit_b16', (224, 224))
    >>> resolve("vit_b16", weights="augreg2_in21k_ft_in1k").weights == source.weights
    True
    >>> resolve("vit_base_patch16_224.augreg_in21k", pretrained=False).spec.num_classes  # timm's name, its tag's head
    21843
    """
    source = os.fspath(source) if isinstance(source, os.PathLike) else source
    weights = os.fspath(weights) if isinstance(weights, os.PathLike) else weights
    if not isinstance(source, str):
        raise TypeError(f"Expected a model name, folder, file or URL (a str); got {type(source).__name__}.")
    if pretrained not in (None, True, False):
        raise ValueError(f"pretrained must be True, False or None (what the name says); got {pretrained!r}.")
    if pretrained is False:
        return _architecture_alone(source, weights)
    if pretrained and source in ARCHITECTURES and weights is None:
        source = _default_tagged(source)
    describe = next((describe for _, holds, describe in ENTRIES if holds(source)), _unknown)
    described = describe(source, model_name=model_name, loading=loading)
    if weights is not None:
        return _with_weights(described, weights)
    if (loading or pretrained) and described.weights is None:
        raise NoWeightsError(_no_weights_message(source))
    if model_name is not None and described.holds_architecture and described.kind != KERAS_FILE:
        raise ValueError(f"{source!r} holds its own architecture; model_name={model_name!r} would be a second one.")
    return described


def is_url(value):
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def _is_keras_path(path):
    return path.endswith(".keras") or (os.path.isfile(path) and sniff_container_or_none(path) == "keras")


def sniff_container_or_none(path):
    try:
        return sniff_container(path)
    except Exception:  # noqa: BLE001 (a file that is no model at all: described as a checkpoint, refused there)
        return None


# --- the entries ----------------------------------------------------------------------------


def _variant(name, **_):
    return ModelSource(VARIANT, name, name=name, spec=registry.get_spec(name))


def _timm_architecture(name, loading=False, **_):
    if loading:
        raise NoWeightsError(_no_weights_message(name))
    reason = timm_config.support(name)
    if reason is not None:
        raise ValueError(f"{name!r}: {reason}")
    spec = ViTSpec.from_config(timm_config.spec_options(timm_config.architecture_args(name)))
    return ModelSource(TIMM_ARCHITECTURE, name, name=name, spec=spec)


def _timm_tagged(name, loading=False, **_):
    """timm's ``<architecture>.<tag>``: what its hub name loads (``timm_names``); where the
    repository is another architecture's (timm's QuickGELU CLIPs share their weights with
    the GELU ones), built as the name's architecture."""
    architecture, tag = timm_names.split(name)
    return repository_source(timm_names.hub_name(architecture, tag), architecture=architecture, loading=loading)


def _default_tagged(architecture):
    """``<architecture>.<timm's default tag>`` (``pretrained=True``)."""
    tag = default_tag(architecture)
    if tag is None:
        raise NoWeightsError(
            f"{architecture!r}: timm has no pretrained weights for it. " + _no_weights_message(architecture)
        )
    return f"{architecture}.{tag}"


def _architecture_alone(name, weights):
    """``pretrained=False``: the architecture a name gives, without its weights, as timm's
    ``pretrained=False`` builds it (a tagged name: the tag's classes and input size); nothing
    is fetched."""
    if weights is not None:
        raise ValueError(f"pretrained=False builds the architecture alone; weights={weights!r} would load weights.")
    tagged = timm_names.split(name)
    if tagged is not None:
        architecture = _timm_architecture(tagged[0])
        return dataclasses.replace(
            architecture, given=name, spec=architecture.spec.replace(**timm_names.tag_options(*tagged))
        )
    described = _preset(name) if name in PRESETS else resolve(name)  # an unknown name: suggestions
    if described.kind in (PRESET, HUB, VARIANT, TIMM_ARCHITECTURE):  # a name: its architecture, fresh weights
        return dataclasses.replace(described, weights=None, class_names=None)
    raise ValueError(
        f"pretrained=False takes a model name (one of list_models(), a preset, a hub name or timm's "
        f"<architecture>.<tag>); got {name!r}, a {described.kind.replace('_', ' ')} that holds its weights: load it "
        "without pretrained, or build its architecture by name."
    )


def _preset(name, **_):
    preset = get_preset(name)  # an unknown one: suggestions
    return ModelSource(
        PRESET,
        name,
        name=preset.model,
        spec=preset.spec,
        weights=Weights(url=preset.url, sha256=preset.sha256, size=preset.size),
        preprocessing=dict(preset.preprocessing),
        class_names=preset.labels,
        num_classes=preset.num_classes,
    )


def _keras_hub_folder(folder, **_):
    """A keras-hub preset folder: its backbone's (and task's) arguments as a spec, the
    weights keras-hub loads from it, its image converter as the pre-processing."""
    options, preprocessing = keras_hub_config.from_preset_folder(folder)
    spec = ViTSpec.from_config(options)
    text = None
    if keras_hub_text.has_pair(folder):
        text_spec, rows, scoring, head = keras_hub_text.pair_parts(folder)
        text = TextTower(text_spec, tuple(rows), folder, scoring, tokenizer_files="keras_hub", head_prefix=head)
    return ModelSource(
        KERAS_HUB_FOLDER,
        folder,
        name=os.path.basename(os.path.normpath(folder)),
        spec=spec,
        weights=Weights(path=folder, container="keras_hub"),
        preprocessing=preprocessing,
        num_classes=spec.num_classes if spec.include_top else None,
        text=text,
    )


def _local_preset(folder, **_):
    local.read_card(folder)  # the model file checked against its card
    path = os.path.join(folder, local.MODEL_FILE)
    return ModelSource(LOCAL_PRESET, folder, weights=Weights(path=path, container="keras"))


def _other_folder(folder, loading=False, **_):
    if loading:
        raise InvalidModelFileError(_not_a_model_file(folder, "a folder"))
    local.read_card(folder)  # says what a preset folder holds
    raise AssertionError("read_card accepts only preset folders")


def _keras_file(path, model_name=None, **_):
    container = _check_model_file(path)
    if model_name:
        registry.get_spec(model_name)  # unknown names fail here, with suggestions
    if container != "keras":
        return _checkpoint(path, model_name=model_name, container=container)
    return ModelSource(KERAS_FILE, path, weights=Weights(path=path, container="keras"))


def _file(path, model_name=None, **_):
    container = _check_model_file(path)
    if container == "keras":
        return _keras_file(path, model_name=model_name)
    return _checkpoint(path, model_name=model_name, container=container)


def _checkpoint(path, model_name=None, container=None, **_):
    """A weights file of ``model_name``'s architecture, with the numerics its layout was trained with."""
    if model_name is None:  # the builder asks for it; a recipe fills it in itself
        return ModelSource(CHECKPOINT, path, weights=Weights(path=path, container=container))
    spec = registry.get_spec(model_name)
    # Read once: its numerics here, its weights in the builder (a .weights.h5 holds no names to read).
    checkpoint = None if container == "keras_weights" else read_checkpoint(path)
    if checkpoint is not None:
        spec = spec.replace(**trained_numerics(checkpoint, spec.resnet is not None))
    weights = Weights(path=path, container=container, checkpoint=checkpoint)
    return ModelSource(CHECKPOINT, path, name=model_name, spec=spec, weights=weights)


def _url(url, model_name=None, loading=False, **_):
    if model_name is None:
        raise InvalidModelFileError(
            f"{url} is a checkpoint's URL, which holds weights only: give the architecture to build them "
            "into (model_name=..., one of keras_vit.list_models())."
        )
    path = hub.fetch_url(url)
    return _checkpoint(path, model_name=model_name, container=_check_model_file(path))


def _unknown(name, loading=False, **_):
    """Neither a known name nor an existing path: an unknown preset or name (with
    suggestions), or a missing file."""
    if os.sep not in name and os.path.splitext(name)[1] not in CHECKPOINT_EXTENSIONS:
        if "." in name:
            get_preset(name)  # an unknown preset: suggestions
        if not loading:
            registry.get_spec(name)  # an unknown name: suggestions
    raise InvalidModelFileError(_not_a_model_file(name, "no such file or folder"))


def _named(table):
    return lambda value: value in table


# (kind, test, describe): the first entry whose test holds describes the source. A name
# wins over a folder that happens to share it.
ENTRIES = (
    (VARIANT, _named(VARIANTS), _variant),
    (PRESET, _named(PRESETS), _preset),
    (HUB, timm_names.is_tagged, _timm_tagged),
    (TIMM_ARCHITECTURE, _named(ARCHITECTURES), _timm_architecture),
    (HUB, hub.is_hub_name, repository_source),
    (URL, is_url, _url),
    (LOCAL_PRESET, local.is_preset_folder, _local_preset),
    (KERAS_HUB_FOLDER, keras_hub_config.is_preset_folder, _keras_hub_folder),
    ("repository_folder", is_repository_folder, repository_source),
    ("folder", os.path.isdir, _other_folder),
    (KERAS_FILE, _is_keras_path, _keras_file),
    (CHECKPOINT, os.path.isfile, _file),
)


# --- weights given apart from the name (create_model's ``weights``) ----------------------------


def _with_weights(named, weights):
    """``create_model(name, weights=...)``: ``named`` (the name's source) with those weights."""
    name = named.given
    timm_weights = hub.is_hub_name(weights) or is_repository_folder(weights)
    if timm_weights and named.kind != VARIANT:
        raise ValueError(
            f"weights={weights!r} is a hub model: expected a model name of its size for name (one of "
            f"list_models()), or the timm model as name alone; got name={name!r}."
        )
    if named.kind == TIMM_ARCHITECTURE:
        raise ValueError(
            f"{name!r} is a timm architecture: its pretrained weights load by hub name, "
            f"create_model('hf-hub:timm/{name}.<tag>'); got weights={weights!r}."
        )
    if named.kind == PRESET:
        raise ValueError(
            f"{name!r} is a preset, which names its weights; weights={weights!r} would be a second source. "
            f"Use create_model({name.split('.')[0]!r}, weights=...) to load other weights."
        )
    if named.kind != VARIANT:
        raise ValueError(f"{name!r} holds its own weights; weights={weights!r} would be a second source.")
    if timm_weights:
        return _sized_as(repository_source(weights), name)
    if is_url(weights):
        return _checkpoint(hub.fetch_url(weights), model_name=name)
    if os.path.exists(weights):
        return _checkpoint(weights, model_name=name, container=sniff_container_or_none(weights))
    if os.sep in weights or os.path.splitext(weights)[1] in CHECKPOINT_EXTENSIONS:
        raise FileNotFoundError(f"weights={weights!r}: no such file or folder.")
    full = weights if "." in weights else f"{name}.{weights}"
    preset = _preset(full)
    if preset.name != name:
        raise ValueError(f"The preset {full!r} holds {preset.name!r} weights, not {name!r}.")
    return preset


# What makes a model name's size: a timm model's must match it to load as that name.
_SIZE = ("patch_size", "hidden_size", "depth", "num_heads", "mlp_dim")


def _sized_as(repository, name):
    """A hub repository's source as the variant ``name``, whose size it must have."""
    named = registry.get_spec(name)
    differ = [
        f"{k} {getattr(repository.spec, k)} (not {getattr(named, k)})"
        for k in _SIZE
        if getattr(repository.spec, k) != getattr(named, k)
    ]
    if differ:
        raise ValueError(
            f"{repository.given} holds a {repository.name} of another size than {name}: {', '.join(differ)}. "
            f"Expected {name}'s size; or create_model({repository.given!r}) builds it as it is."
        )
    return dataclasses.replace(repository, name=name)


# --- checks and messages ---------------------------------------------------------------------


def _check_model_file(path):
    """``path``'s container, or ``InvalidModelFileError`` if it is missing or no model file."""
    if not os.path.isfile(path):
        what = "a folder" if os.path.isdir(path) else "no such file or folder"
        raise InvalidModelFileError(_not_a_model_file(path, what))
    try:
        return sniff_container(path)
    except Exception as error:  # also zipfile.BadZipFile from a truncated file
        raise InvalidModelFileError(
            f"{path} is not a model file keras-vit can load: expected a .keras model or a "
            f"checkpoint that keras_vit.load_weights reads. ({error})"
        ) from None


def _not_a_model_file(path, what):
    found = f": {what}" if what.startswith("no such") else f" is {what}"
    return f"Expected a model file (.keras, or a checkpoint with a model name); {path}{found}."


def _no_weights_message(name):
    presets = list_presets(f"{name}.*")[:3] or list_presets()[:3]
    close = difflib.get_close_matches(name, PRESETS, n=3, cutoff=0.5)
    return (
        f"{name!r} names an architecture, which has no pre-trained weights. Expected a preset such as "
        f"{', '.join(close or presets)} (keras_vit.list_models(pretrained=True)), a hub name "
        "('hf-hub:timm/<architecture>.<tag>'), a preset folder (keras_vit.save_preset), a .keras file, "
        "or a checkpoint with its model name."
    )
