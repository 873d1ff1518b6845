"""Named models: ``create_model("vit_b16", ...)`` and ``list_models()``."""

import difflib
import fnmatch

from keras_vit.models.configs import CONFIGS
from keras_vit.models.vit import VisionTransformer


def list_models(pattern="*"):
    """Names accepted by ``create_model``, sorted, filtered by a shell-style pattern.

    >>> list_models("vit_b*")
    ['vit_b14', 'vit_b16', 'vit_b32', 'vit_b8']
    """
    return sorted(name for name in CONFIGS if fnmatch.fnmatch(name, pattern))


def get_config(name):
    """The architecture (``ViTConfig``) of a named model; unknown names suggest close ones."""
    try:
        return CONFIGS[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), CONFIGS, n=4, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"Unknown model name {name!r}.{hint} Known names: keras_vit.list_models()."
        ) from None


def create_model(name, image_size=224, num_classes=1000, include_top=True, pooling="token", **kwargs):
    """Builds a named ViT or hybrid ResNet+ViT as a functional ``keras.Model``.

    Args:
        name: one of ``list_models()``: ``"vit_{ti,s,b,l,h}{8,14,16,32}"`` (size and patch)
            or a hybrid such as ``"r50_vit_b16"``.
        image_size: input side or ``(height, width)``, divisible by the total stride.
        num_classes: classifier outputs.
        include_top: add the classifier head.
        pooling: ``"token"``, ``"gap"`` or None (see ``VisionTransformer``).
        **kwargs: any other ``VisionTransformer`` option (``representation_size``,
            ``dropout_rate``, ``drop_path_rate``, ``layer_norm_epsilon``,
            ``gelu_approximate``, ``position_embedding``, ...). Architecture fields of the
            named config may also be overridden, e.g. ``depth=2`` for a quick test.

    Example:
    >>> model = create_model("vit_ti16", image_size=32, num_classes=10, depth=1)
    >>> model.output_shape
    (None, 10)
    """
    arch = get_config(name).as_kwargs()
    arch.update({k: kwargs.pop(k) for k in list(kwargs) if k in arch})
    kwargs.setdefault("name", name)
    return VisionTransformer(
        image_size=image_size,
        num_classes=num_classes,
        include_top=include_top,
        pooling=pooling,
        **arch,
        **kwargs,
    )
