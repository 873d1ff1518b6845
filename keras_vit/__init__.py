"""keras-vit: the Vision Transformer and hybrid ResNet+ViT for Keras 3, on every backend.

Importing the package defines its names and imports no backend: the first use of one
(``keras_vit.create_model``, ``from keras_vit import load_model``) imports Keras and the
modules behind them all, and a submodule (``keras_vit.layers``) imports on first use too.
When Keras is imported already, so are they, at once: a saved model's classes and its
recipe's optimiser are then registered with Keras, for ``keras.saving.load_model``.
"""

import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys
import typing as _typing

from keras_vit import dependencies as _dependencies
from keras_vit.version import __version__

if _typing.TYPE_CHECKING:  # the names as type checkers and the API reference read them; imported on first use
    from keras_vit.checkpoints.loader import load_weights
    from keras_vit.factory import create_model, list_models, load_model, save_model
    from keras_vit.labels import decode_predictions
    from keras_vit.models import ResNetSpec, VisionTransformer, ViTSpec, get_spec, resize
    from keras_vit.presets.catalog import get_preset
    from keras_vit.presets.local import save_preset
    from keras_vit.torch_graph import compile_for_inference

# The package's names: where each is defined.
_DEFINED_IN = {
    "ResNetSpec": "keras_vit.models",
    "ViTSpec": "keras_vit.models",
    "VisionTransformer": "keras_vit.models",
    "compile_for_inference": "keras_vit.torch_graph",
    "create_model": "keras_vit.factory",
    "decode_predictions": "keras_vit.labels",
    "get_preset": "keras_vit.presets",
    "get_spec": "keras_vit.models",
    "list_models": "keras_vit.factory",
    "load_model": "keras_vit.factory",
    "load_weights": "keras_vit.checkpoints",
    "resize": "keras_vit.models",
    "save_model": "keras_vit.factory",
    "save_preset": "keras_vit.presets",
}
# Imported with them for what they register with Keras: a saved recipe's optimiser and the
# self-supervised models' classes.
_REGISTERING = (
    "keras_vit.optimizers",
    "keras_vit.models.masked_autoencoder",
    "keras_vit.models.masked_patches",
    "keras_vit.models.image_text",
    "keras_vit.models.text_tower",
)

__all__ = sorted([*_DEFINED_IN, "__version__"])


def _check_backend():
    """A backend Keras cannot load, found before Keras is imported: raised at the first use of
    a name (not at import, which the keras-vit program makes, answering it in one line)."""
    if "keras" in _sys.modules:  # Keras loaded its backend already
        return
    problem = _dependencies.backend_problem()
    if problem is not None:
        raise problem


def _define_all():
    _check_backend()
    for module in _REGISTERING:
        _importlib.import_module(module)
    for name, module in _DEFINED_IN.items():
        globals()[name] = getattr(_importlib.import_module(module), name)


def __getattr__(name):
    if name in _DEFINED_IN:
        _define_all()
        return globals()[name]
    if not name.startswith("_") and _importlib_util.find_spec(f"{__name__}.{name}") is not None:
        return _importlib.import_module(f"{__name__}.{name}")  # also sets it here: asked once
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})


if "keras" in _sys.modules:  # its backend is loaded: nothing to gain by waiting
    _define_all()
