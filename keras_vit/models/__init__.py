"""The model spec (data), the variants, the functional model, and the registry of named
architectures (presets and weights files are ``keras_vit.create_model``'s: ``keras_vit.factory``).
The self-supervised models register with Keras where ``keras_vit`` registers its classes
(its ``_REGISTERING``)."""

import typing

from keras_vit.lazy import package

if typing.TYPE_CHECKING:  # the names, as type checkers, the API reference and keras_vit.lazy.declared read them
    from keras_vit.models.image_text import ImageTextModel
    from keras_vit.models.input_size import resize
    from keras_vit.models.masked_autoencoder import MaskedAutoencoder
    from keras_vit.models.masked_patches import MaskedPatchPrediction
    from keras_vit.models.registry import create_model, get_spec, list_models
    from keras_vit.models.spec import ResNetSpec, ViTSpec
    from keras_vit.models.text_spec import TextSpec
    from keras_vit.models.text_tower import text_encoder
    from keras_vit.models.variants import SIZES, VARIANTS
    from keras_vit.models.vit import VisionTransformer

# Imported on first use (``keras_vit.lazy``): the spec and the variants are data that a
# recipe's flags (a command's ``--help``) read with no backend.
__all__, __getattr__, __dir__ = package(__name__, __file__)
