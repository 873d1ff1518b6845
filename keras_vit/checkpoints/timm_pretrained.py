"""timm's pretrained tags of each architecture in ``timm_architectures``, timm's default
first (its untagged name with ``pretrained=True``): ``PRETRAINED[architecture][tag]`` is the
hub repository timm fetches the tag's weights from (None: no hub file), its classes and its
input size, which timm builds the tag with, with or without its weights.
``keras_vit.presets.timm_names`` reads them.

Read from ``timm_pretrained.json``: written by ``scripts/make_timm_table.py`` from an
installed timm, not by hand.
"""

import json
import os

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "timm_pretrained.json"), encoding="utf-8") as f:
    PRETRAINED = {
        architecture: {tag: tuple(entry) for tag, entry in tags.items()}
        for architecture, tags in json.load(f)["pretrained"].items()
    }


def default_tag(architecture):
    """timm's tag for ``architecture`` with ``pretrained=True`` (its first); None if it has none.

    >>> default_tag("vit_base_patch16_224")
    'augreg2_in21k_ft_in1k'
    """
    return next(iter(PRETRAINED.get(architecture, {})), None)
