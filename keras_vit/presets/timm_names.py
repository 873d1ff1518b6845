"""timm's names as timm's users write them: ``<architecture>.<tag>`` (a pretrained tag of one
of timm's ViTs), and an untagged architecture with ``pretrained=True`` (timm's default tag).

Both load what the hub name ``hf-hub:timm/<architecture>.<tag>`` loads, from the repository
timm fetches that tag from (``timm_pretrained.PRETRAINED``, written from timm with the
architectures); with ``pretrained=False`` the tag gives the classes and input size timm
builds it with, and nothing is fetched. The table is data: no network is asked which tags
exist.
"""

import fnmatch

from keras_vit.checkpoints import timm_config
from keras_vit.checkpoints.timm_pretrained import PRETRAINED
from keras_vit.presets import hub


def split(name):
    """``(architecture, tag)`` of a tagged timm name, None for any other name.

    >>> split("vit_base_patch16_224.augreg2_in21k_ft_in1k")
    ('vit_base_patch16_224', 'augreg2_in21k_ft_in1k')
    >>> split("vit_b16.augreg2_in21k_ft_in1k") is None  # keras-vit's own preset name
    True
    """
    architecture, dot, tag = name.partition(".") if isinstance(name, str) else ("", "", "")
    return (architecture, tag) if dot and tag in PRETRAINED.get(architecture, {}) else None


def is_tagged(name):
    return split(name) is not None


def tag_options(architecture, tag):
    """The spec options timm builds ``architecture`` with for ``tag``, with or without its
    weights: its classes (none: the pooled features, no head) and input size.

    >>> tag_options("vit_base_patch16_224", "augreg_in21k")
    {'image_size': 224, 'num_classes': 21843}
    >>> tag_options("vit_small_patch14_dinov2", "lvd142m")
    {'image_size': 518, 'include_top': False}
    """
    _, classes, size = PRETRAINED[architecture][tag]
    head = {"num_classes": classes} if classes else {"include_top": False}
    return {"image_size": size if isinstance(size, int) else tuple(size), **head}


def hub_name(architecture, tag):
    """The hub name timm fetches the weights of ``architecture.tag`` from; a ``ValueError``
    where timm has no hub file for it.

    >>> hub_name("vit_base_patch16_224", "augreg2_in21k_ft_in1k")
    'hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k'
    >>> hub_name("vit_base_patch16_clip_quickgelu_224", "openai")  # another architecture's repository
    'hf-hub:timm/vit_base_patch16_clip_224.openai'
    """
    repository = PRETRAINED[architecture][tag][0]
    if repository is None:
        raise ValueError(
            f"{architecture}.{tag}: timm publishes no hub file for these weights (timm loads them from another "
            "site), so keras-vit cannot fetch them by name. Expected a tag with a hub file, one of "
            f"{', '.join(t for t, (r, _, _) in PRETRAINED[architecture].items() if r) or 'none'}; or give the "
            f"weights file: create_model('{architecture}', weights=...)."
        )
    return f"{hub.PREFIX}{repository}"


def pretrained_names(pattern="*"):
    """timm's pretrained names (``<architecture>.<tag>``) of the architectures keras-vit
    builds whose weights are on the hub, matching a shell-style ``pattern``, sorted.

    >>> pretrained_names("vit_small_patch14_reg4_dinov2*")
    ['vit_small_patch14_reg4_dinov2.lvd142m']
    """
    built = set(timm_config.buildable())
    names = (
        f"{architecture}.{tag}"
        for architecture, tags in PRETRAINED.items()
        if architecture in built
        for tag, (repository, _, _) in tags.items()
        if repository is not None
    )
    return sorted(name for name in names if fnmatch.fnmatch(name, pattern))
