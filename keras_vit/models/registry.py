"""Named architectures: ``get_spec(name)``, ``list_models()`` and ``create_model(name, ...)``.

These know the variants only, and build with weights drawn at random. Presets, local preset
folders and weights files are resolved a floor above, by ``keras_vit.create_model``
(``keras_vit.factory``), which builds through ``create_model`` here.
"""

import difflib
import fnmatch

from keras_vit.models.variants import VARIANTS
from keras_vit.models.vit import VisionTransformer

# Arguments of the model itself; every other option (image_size and num_classes too) is the spec's.
MODEL_ARGUMENTS = ("name", "preprocessing", "class_names")


def list_models(pattern="*"):
    """Architecture names, sorted, filtered by a shell-style pattern (``keras_vit.list_models``
    also lists the presets).

    >>> list_models("vit_b*")
    ['vit_b14', 'vit_b16', 'vit_b32', 'vit_b8']
    """
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


def create_model(name, image_size=None, num_classes=None, *, dtype=None, **options):
    """A named architecture as a functional ``VisionTransformer``, its weights drawn at random.

    The arguments are ``keras_vit.create_model``'s but ``weights``: ``name`` is one of
    ``list_models()``, ``options`` are ``ViTSpec`` fields or the model's ``name``,
    ``preprocessing`` and ``class_names``. For presets and weights, use ``keras_vit.create_model``.

    Examples:
        >>> model = create_model("vit_ti16", image_size=32, num_classes=10, depth=1)
        >>> model.output_shape
        (None, 10)
    """
    if "weights" in options:
        raise ValueError("keras_vit.models.create_model builds an architecture; keras_vit.create_model loads weights.")
    own = {k: options.pop(k) for k in MODEL_ARGUMENTS if k in options}
    options.update({k: v for k, v in dict(image_size=image_size, num_classes=num_classes).items() if v is not None})
    return VisionTransformer(get_spec(name).replace(**options), dtype=dtype, **{"name": name, **own})
