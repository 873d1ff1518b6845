"""Named models: ``create_model("vit_b16", ...)``, ``get_spec(name)`` and ``list_models()``."""

import difflib
import fnmatch

from keras_vit.models.variants import VARIANTS
from keras_vit.models.vit import VisionTransformer


def list_models(pattern="*", pretrained=False):
    """Names accepted by ``create_model``, sorted, filtered by a shell-style pattern.

    With ``pretrained=True``, the presets: published checkpoints named ``<model>.<tag>``
    (``keras_vit.get_preset(name).card()`` describes one).

    >>> list_models("vit_b*")
    ['vit_b14', 'vit_b16', 'vit_b32', 'vit_b8']
    >>> list_models("vit_b16.*384", pretrained=True)
    ['vit_b16.augreg_in21k_ft_in1k_384', 'vit_b16.orig_in21k_ft_in1k_384']
    """
    if pretrained:
        from keras_vit.presets.catalog import list_presets

        return list_presets(pattern)
    return sorted(name for name in VARIANTS if fnmatch.fnmatch(name, pattern))


def get_spec(name):
    """The ``ViTSpec`` of a named model; unknown names suggest close ones.

    >>> get_spec("vit_b16").hidden_size
    768
    """
    try:
        return VARIANTS[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), VARIANTS, n=4, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"Unknown model name {name!r}.{hint} Known names: keras_vit.list_models().") from None


def create_model(name, image_size=None, num_classes=None, *, weights=None, dtype=None, **options):
    """Builds a named ViT or hybrid ResNet+ViT as a functional ``keras.Model``, optionally pretrained.

    Args:
        name: one of ``list_models()``: ``"vit_{ti,s,b,l,h}{8,14,16,32}"`` (size and patch)
            or a hybrid such as ``"r50_vit_b16"``; or a preset, ``"<model>.<tag>"`` from
            ``list_models(pretrained=True)`` (e.g. ``"vit_b16.augreg2_in21k_ft_in1k"``);
            or the path of a local preset folder (``keras_vit.save_preset``) or ``.keras`` file.
        image_size: input side or ``(height, width)``, divisible by the total stride
            (default: the variant's 224, or the preset's own). Pretrained position
            embeddings are resampled to it.
        num_classes: classifier outputs (default: the variant's 1000, or the preset's own);
            another count than the weights' keeps a fresh head, to fine-tune.
        weights: a preset tag of ``name`` (``"augreg2_in21k_ft_in1k"``), a checkpoint path
            or URL (the original ``.npz``, timm, HF or keras-vit files). Downloads are cached
            (``KERAS_VIT_HOME``; ``KERAS_VIT_MIRROR`` and ``KERAS_VIT_OFFLINE`` as in
            ``keras_vit.presets.download``). The model gets the numerics the weights were
            trained with (their layout's), unless ``options`` say otherwise.
        dtype: the Keras dtype policy, e.g. ``"mixed_bfloat16"`` (default: the global one).
        **options: any field of ``ViTSpec`` (``pooling``, ``representation_size``,
            ``dropout_rate``, ``layer_norm_epsilon``, ``gelu_approximate``, ...), the
            hybrid's ResNet fields as ``resnet_<field>``, the model's ``name``,
            ``preprocessing`` or ``class_names``. Architecture fields may be overridden
            too, e.g. ``depth=2`` for a quick test.

    Example:
    >>> model = create_model("vit_ti16", image_size=32, num_classes=10, depth=1)
    >>> model.output_shape
    (None, 10)
    """
    from keras_vit.presets import pretrained

    # The model's own arguments; everything else (image_size and num_classes too) is the spec's.
    own = {k: options.pop(k) for k in ("name", "preprocessing", "class_names") if k in options}
    options.update({k: v for k, v in dict(image_size=image_size, num_classes=num_classes).items() if v is not None})
    model = pretrained.build(name, weights, dtype, options, own)
    if model is not None:
        return model
    return VisionTransformer(get_spec(name).replace(**options), dtype=dtype, **{"name": name, **own})
