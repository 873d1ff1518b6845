"""Exports for deployment: TF SavedModel (TF Serving), LiteRT/TFLite, ONNX and ``torch.export``.

The one place in keras-vit where TensorFlow- and PyTorch-specific code lives. Models
trained on any backend export the same way: a format the current backend cannot write is
converted in a child process with the backend that can (see ``export_model``).

- ``api``: ``export_model``, checks first, then converts, verifies and moves into place.
- ``formats``: the formats as data; ``convert``: writing them (here or in that child).
- ``serving``: the signatures and the SavedModel, which ``litert`` and ``onnx`` convert.
- ``torch_program``: the PyTorch seam: the model as one ``torch.export`` graph, saved as
  ``.pt2`` (the ``torch_export`` format) or compiled (``keras_vit.compile_for_inference``).
- ``representative``: calibration and verification images; ``verify``: the comparison
  with the Keras model; ``runtime``: running an exported file.
- ``errors``: what can go wrong, naming the layers a converter could not express.

Examples:
    >>> import tempfile, keras_vit
    >>> from keras_vit.export import export_model, load_exported
    >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    >>> result = export_model(model, tempfile.mkdtemp(), formats=["tflite_float32"])
    >>> predict = load_exported(result.paths["tflite_float32"])
    >>> import numpy as np
    >>> predict(np.zeros((2, 16, 16, 3), np.uint8))["probabilities"].shape
    (2, 3)
"""

import typing

from keras_vit.lazy import package

if typing.TYPE_CHECKING:  # the names, as type checkers, the API reference and keras_vit.lazy.declared read them
    from keras_vit.export.api import ExportResult, export_model
    from keras_vit.export.errors import (
        ExportError,
        InvalidModelFileError,
        UnconvertibleModelError,
        VerificationError,
    )
    from keras_vit.export.formats import DEFAULT_FORMATS, FORMATS, ExportFormat, parse_formats
    from keras_vit.export.representative import digits_images
    from keras_vit.export.runtime import load_exported, tflite_interpreter
    from keras_vit.export.verify import TOLERANCES

# Imported on first use (``keras_vit.lazy``): ``keras-vit export --help`` reads the formats
# alone, with no backend.
__all__, __getattr__, __dir__ = package(__name__, __file__)
