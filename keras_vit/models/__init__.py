"""The model spec (data), the variants, the functional model, and the registry of named
architectures (presets and weights files are ``keras_vit.create_model``'s: ``keras_vit.factory``).
The self-supervised models register with Keras where ``keras_vit`` registers its classes
(its ``_REGISTERING``)."""

import typing

from keras_vit.lazy import exports

if typing.TYPE_CHECKING:  # the names as type checkers and the API reference read them
    from keras_vit.models.input_size import resize
    from keras_vit.models.masked_autoencoder import MaskedAutoencoder
    from keras_vit.models.masked_patches import MaskedPatchPrediction
    from keras_vit.models.registry import create_model, get_spec, list_models
    from keras_vit.models.spec import ResNetSpec, ViTSpec
    from keras_vit.models.variants import SIZES, VARIANTS
    from keras_vit.models.vit import VisionTransformer

# Imported on first use (``keras_vit.lazy``): the spec and the variants are data that a
# recipe's flags (a command's ``--help``) read with no backend.
_DEFINED_IN = {
    "resize": "keras_vit.models.input_size",
    "MaskedAutoencoder": "keras_vit.models.masked_autoencoder",
    "MaskedPatchPrediction": "keras_vit.models.masked_patches",
    **dict.fromkeys(("create_model", "get_spec", "list_models"), "keras_vit.models.registry"),
    **dict.fromkeys(("ResNetSpec", "ViTSpec"), "keras_vit.models.spec"),
    **dict.fromkeys(("SIZES", "VARIANTS"), "keras_vit.models.variants"),
    "VisionTransformer": "keras_vit.models.vit",
}
__all__ = sorted(_DEFINED_IN)
__getattr__, __dir__ = exports(__name__, _DEFINED_IN)
