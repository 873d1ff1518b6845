"""Hugging Face hub repositories as timm publishes them: ``hf-hub:<org>/<name>`` -> local files.

A timm repository (``timm/vit_small_patch14_reg4_dinov2.lvd142m``) holds a ``config.json``
and a ``model.safetensors``; both are fetched through keras-vit's verified cache
(``download``), so ``KERAS_VIT_HOME``, ``KERAS_VIT_MIRROR`` and ``KERAS_VIT_OFFLINE`` work
for them as for every preset. The hub's own settings are honoured too: ``HF_ENDPOINT``
(another hub, e.g. a company's mirror of it) and ``HF_HUB_OFFLINE`` (no network).
"""

import os
import re

from keras_vit.presets import download

PREFIX = "hf-hub:"
FILES = ("config.json", "model.safetensors")  # what keras-vit reads of a timm repository
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def is_hub_name(name):
    return isinstance(name, str) and name.startswith(PREFIX)


def repo_id(name):
    """``"timm/<name>"`` from ``"hf-hub:timm/<name>"``, checked.

    >>> repo_id("hf-hub:timm/vit_small_patch16_224.augreg_in21k")
    'timm/vit_small_patch16_224.augreg_in21k'
    """
    repo = name[len(PREFIX) :] if is_hub_name(name) else name
    if not _REPO.fullmatch(repo or ""):
        raise ValueError(f"Expected a hub name 'hf-hub:<organisation>/<repository>'; got {name!r}.")
    return repo


def file_url(repo, filename, revision="main"):
    """Where the hub (``HF_ENDPOINT``, default huggingface.co) serves one file of ``repo``.

    >>> file_url("timm/vit_small_patch16_224.augreg_in21k", "config.json")
    'https://huggingface.co/timm/vit_small_patch16_224.augreg_in21k/resolve/main/config.json'
    """
    endpoint = os.environ.get("HF_ENDPOINT", "").strip() or "https://huggingface.co"
    return f"{endpoint.rstrip('/')}/{repo}/resolve/{revision}/{filename}"


def fetch(name, filename, progress=True):
    """The local path of one file of the repository, downloaded once into the cache."""
    offline = download.is_offline("HF_HUB_OFFLINE") or None  # None: as KERAS_VIT_OFFLINE says
    return download.download(file_url(repo_id(name), filename), progress=progress, offline=offline)
