"""A repository of open_clip's hub layout (``open_clip_config.json`` beside
``open_clip_model.safetensors`` or ``open_clip_pytorch_model.bin``), on the hub or as a
folder: both towers from its ``model_cfg`` (``checkpoints.open_clip_config``), the
pre-processing from its ``preprocess_cfg``, the tokenizer open_clip would use."""

import dataclasses
import json
import os

from keras_vit.checkpoints import open_clip_config
from keras_vit.checkpoints.open_clip_config import CONFIG_FILE, WEIGHTS_FILES
from keras_vit.models.spec import ViTSpec
from keras_vit.presets import hub
from keras_vit.sources.description import HUB, OPEN_CLIP_FOLDER, ModelSource, TextTower, Weights
from keras_vit.sources.repository_file import repository_file


def is_open_clip_folder(path):
    """Whether ``path`` is a folder holding open_clip's ``open_clip_config.json``."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_FILE))


def _weights(given):
    """The weights file: safetensors where the repository has it, else open_clip's pickle
    (read as every PyTorch file is, with nothing but tensors unpickled)."""
    if hub.is_hub_name(given):
        return Weights(hub_name=given, filename=WEIGHTS_FILES[0], fallback=WEIGHTS_FILES[1])
    for filename in WEIGHTS_FILES:
        path = repository_file(given, filename, missing_ok=True)
        if path is not None:
            return Weights(path=path)
    raise FileNotFoundError(
        f"{given}: open_clip's folder holds none of its weights files ({', '.join(WEIGHTS_FILES)})."
    )


def _text_tower(given, model_cfg):
    """The text half, with the tokenizer open_clip's ``get_tokenizer`` picks: the files of its
    ``hf_tokenizer_name`` (a folder's own, as open_clip's ``local-dir:``), or the built-in
    CLIP vocabulary (None)."""
    name, clean, context_length = open_clip_config.tokenizer_options(model_cfg)
    if name is not None:
        name = given if not hub.is_hub_name(given) else f"{hub.PREFIX}{name}"
    rows, prefix = open_clip_config.text_rows(model_cfg)
    return TextTower(
        spec=open_clip_config.text_spec(model_cfg),
        rows=tuple(rows),
        tokenizer=name,
        scoring=open_clip_config.scoring(model_cfg),
        prefix=prefix,
        clean=clean,
        context_length=context_length,
    )


def _config(given, path):
    """``(config, model_cfg)`` of the ``open_clip_config.json`` at ``path``."""
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    model_cfg = config.get("model_cfg") if isinstance(config, dict) else None
    if not isinstance(model_cfg, dict) or "embed_dim" not in model_cfg:
        raise ValueError(f"{given}: its {CONFIG_FILE} holds no model_cfg with an embed_dim, as open_clip writes it.")
    return config, model_cfg


def open_clip_text(given):
    """The text half of a timm repository that holds open_clip's files beside its own (timm's
    CLIPs: ``hf-hub:timm/vit_base_patch16_clip_224.openai``), read from open_clip's weights
    file; None where it has none. Offline, a hub repository's config is looked for in the
    cache alone."""
    if hub.is_hub_name(given) and hub.is_offline():
        path = hub.cached(given, CONFIG_FILE)
    else:
        path = repository_file(given, CONFIG_FILE, missing_ok=True)
    if path is None:
        return None
    return dataclasses.replace(_text_tower(given, _config(given, path)[1]), weights=_weights(given))


def open_clip_source(given, **_):
    """The ``ModelSource`` of an open_clip repository (``hf-hub:`` name) or folder."""
    config, model_cfg = _config(given, repository_file(given, CONFIG_FILE))
    spec = ViTSpec.from_config(open_clip_config.image_options(model_cfg))
    text = _text_tower(given, model_cfg)  # what is not built is said before any file is looked for
    on_hub = hub.is_hub_name(given)
    return ModelSource(
        HUB if on_hub else OPEN_CLIP_FOLDER,
        given,
        name=hub.repo_id(given).split("/")[-1] if on_hub else os.path.basename(os.path.normpath(given)),
        spec=spec,
        weights=_weights(given),
        preprocessing=open_clip_config.preprocessing_options(config.get("preprocess_cfg") or {}),
        text=text,
    )
