"""keras-vit: the Vision Transformer and hybrid ResNet+ViT for Keras 3, on every backend."""

from keras_vit.checkpoints import load_weights
from keras_vit.models import VisionTransformer, create_model, get_config, list_models

__version__ = "0.1.0"
