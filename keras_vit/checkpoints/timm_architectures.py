"""timm's pretrained ViT architectures and the arguments each passes to its constructor
(``ARCHITECTURES``), with classes written by name (``keras_vit.checkpoints.timm_config`` reads
them), from ``timm_architectures.json``: written by ``scripts/make_timm_table.py`` from an
installed timm (``TIMM_VERSION``), not by hand."""

import json
import os

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "timm_architectures.json"), encoding="utf-8") as f:
    _TABLE = json.load(f)

TIMM_VERSION = _TABLE["timm_version"]
ARCHITECTURES = _TABLE["architectures"]
