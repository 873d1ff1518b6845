"""The model spec (data), the variants, the functional model, and the registry of named
architectures (presets and weights files are ``keras_vit.create_model``'s: ``keras_vit.factory``)."""

from keras_vit.models.masked_autoencoder import MaskedAutoencoder  # registered: its files load anywhere
from keras_vit.models.masked_patches import MaskedPatchPrediction  # registered: its files load anywhere
from keras_vit.models.registry import create_model, get_spec, list_models
from keras_vit.models.resize import resize
from keras_vit.models.spec import ResNetSpec, ViTSpec
from keras_vit.models.variants import SIZES, VARIANTS
from keras_vit.models.vit import VisionTransformer
