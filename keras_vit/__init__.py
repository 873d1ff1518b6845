"""keras-vit: the Vision Transformer and hybrid ResNet+ViT for Keras 3, on every backend."""

# ruff: noqa: E402 (KERAS_BACKEND is checked before the imports below import Keras)
import os as _os

from keras_vit import checks as _checks
from keras_vit import quiet as _quiet

_checks.backend_name(_os.environ.get("KERAS_BACKEND") or None)  # before Keras is imported
with _quiet.held_while_importing():  # only in keras-vit's commands, whose program imports this first
    from keras_vit import optimizers as _optimizers  # noqa: F401 (a saved recipe's optimiser loads after import)
    from keras_vit.checkpoints import load_weights
    from keras_vit.factory import create_model, list_models, load_model, save_model
    from keras_vit.labels import decode_predictions
    from keras_vit.models import ResNetSpec, VisionTransformer, ViTSpec, get_spec, resize
    from keras_vit.presets import get_preset, save_preset
    from keras_vit.torch_graph import compile_for_inference
from keras_vit.version import __version__

__all__ = [
    "ResNetSpec",
    "ViTSpec",
    "VisionTransformer",
    "__version__",
    "compile_for_inference",
    "create_model",
    "decode_predictions",
    "get_preset",
    "get_spec",
    "list_models",
    "load_model",
    "load_weights",
    "resize",
    "save_model",
    "save_preset",
]
