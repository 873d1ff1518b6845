"""Model configs (data), the functional model, and the registry of named models."""

from keras_vit.models.configs import CONFIGS, SIZES, ViTConfig
from keras_vit.models.registry import create_model, get_config, list_models
from keras_vit.models.vit import VisionTransformer
