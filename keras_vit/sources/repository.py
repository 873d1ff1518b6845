"""A hub repository's model, timm's or transformers': on the hub (``hf-hub:<org>/<name>``) or
as a folder of its files (what ``save_for_hf`` and ``save_pretrained`` write). Its
``config.json`` says whose it is (timm's ``architecture``, transformers' ``model_type``) and
the spec; the weights are its ``model.safetensors``; the pre-processing is timm's
``pretrained_cfg`` or transformers' processor file. ``keras_vit.sources.resolver`` names
these sources ``HUB``, ``TIMM_FOLDER`` and ``TRANSFORMERS_FOLDER``. A repository of
open_clip's layout alone (no ``config.json``) is ``open_clip_repository``'s.
"""

import json
import os

from keras_vit.checkpoints import timm_config, transformers_config, transformers_text
from keras_vit.checkpoints.open_clip_config import CONFIG_FILE
from keras_vit.checkpoints.transformers_config import UnsupportedModelTypeError
from keras_vit.models.mae_spec import MAESpec
from keras_vit.models.spec import ViTSpec
from keras_vit.presets import hub, local
from keras_vit.sources.description import HUB, TIMM_FOLDER, TRANSFORMERS_FOLDER, ModelSource, TextTower, Weights
from keras_vit.sources.open_clip_repository import is_open_clip_folder, open_clip_source, open_clip_text
from keras_vit.sources.repository_file import repository_file


def is_repository_folder(path):
    """Whether ``path`` is a folder of a model as hub repositories hold one: a
    ``config.json`` naming timm's ``architecture`` or a transformers ``model_type``, or
    open_clip's ``open_clip_config.json`` (and no keras-vit preset card)."""
    if not os.path.isdir(path) or local.is_preset_folder(path):
        return False
    if is_open_clip_folder(path):
        return True
    config = os.path.join(path, "config.json")
    try:
        with open(config, encoding="utf-8") as f:
            config = json.load(f)
        return isinstance(config, dict) and ("architecture" in config or "model_type" in config)
    except (OSError, ValueError):
        return False


WEIGHTS_FILE = "model.safetensors"  # what keras-vit reads of a hub repository, beside its config.json


def repository_source(given, *, architecture=None, loading=False, **_):
    """A hub repository (``hf-hub:``) or a folder holding its files, timm's or transformers':
    its ``config.json`` says which (an ``architecture``, or a ``model_type``). ``architecture``:
    timm's architecture to build instead of the one its config names (a timm name whose
    weights are another architecture's repository). ``loading`` (``load_model``'s): a timm
    repository's open_clip files are looked for too, for the pair they hold."""
    on_hub = hub.is_hub_name(given)
    config = repository_file(given, "config.json", missing_ok=True)
    if config is None and repository_file(given, CONFIG_FILE, missing_ok=True) is not None:
        return open_clip_source(given)  # open_clip's layout alone
    with open(config or repository_file(given, "config.json"), encoding="utf-8") as f:  # none: its error
        config = json.load(f)
    if architecture is not None:
        config = {**config, "architecture": architecture}
    if config.get("model_type") in transformers_text.TEXT_ONLY:
        raise UnsupportedModelTypeError(
            f"{given} holds a text tower alone ({transformers_text.TEXT_ONLY[config['model_type']]}): keras-vit "
            "loads a text tower with its image tower, from a 'clip' or 'siglip' repository (CLIPModel, SiglipModel)."
        )
    if on_hub:
        weights = Weights(hub_name=given, filename=WEIGHTS_FILE)
    else:
        weights = Weights(path=repository_file(given, WEIGHTS_FILE), container="safetensors")
    pretraining = text = None
    if "architecture" in config:
        options, _, preprocessing, class_names = timm_config.from_hub_config(config)
        name, kind = config["architecture"], HUB if on_hub else TIMM_FOLDER
        if loading:  # what load_model may give whole: open_clip's text tower beside timm's files
            text = open_clip_text(given)
    elif "model_type" in config:
        options = transformers_config.spec_options(config)
        if config["model_type"] == "vit_mae":  # its decoder too
            pretraining = MAESpec(**transformers_config.masked_autoencoder_options(config))
        processor = repository_file(given, transformers_config.PROCESSOR_FILE, missing_ok=True)
        preprocessing = None
        if processor is not None:
            with open(processor, encoding="utf-8") as f:
                size, preprocessing = transformers_config.preprocessing_options(json.load(f), options["image_size"])
            options["image_size"] = size
        class_names = transformers_config.class_names(config)
        if transformers_text.has_text_tower(config):
            text = _transformers_text(given, config)
        name = hub.repo_id(given).split("/")[-1] if on_hub else config["model_type"]
        kind = HUB if on_hub else TRANSFORMERS_FOLDER
    else:
        raise ValueError(
            f"{given}: its config.json is neither timm's (an 'architecture') nor transformers' (a 'model_type'); "
            f"keys: {sorted(config)[:8]}."
        )
    spec = ViTSpec.from_config(options)
    return ModelSource(
        kind,
        given,
        name=name,
        spec=spec,
        weights=weights,
        preprocessing=preprocessing,
        class_names=class_names,
        num_classes=spec.num_classes if class_names is not None else None,
        pretraining=pretraining,
        text=text,
    )


def _transformers_text(given, config):
    """The text half of a transformers ``clip`` or ``siglip`` repository: its tokenizer files
    beside the weights, padding to the tower's context (as SigLIP's and SigLIP 2's processors
    are asked to: ``padding="max_length"``)."""
    model_type, spec = config["model_type"], transformers_text.text_spec(config)
    return TextTower(
        spec=spec,
        rows=tuple(transformers_text.text_rows(model_type)),
        tokenizer=given,
        scoring=transformers_text.scoring(model_type),
        context_length=spec.context_length,  # the tower's positions: SigLIP 2's files state none
    )
