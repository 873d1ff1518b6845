"""Writing every requested format from one Keras model (TensorFlow backend only)."""

import os
import shutil
import tempfile

from keras_vit.export.formats import FORMATS


def convert_model(
    model,
    paths,
    *,
    representative_images=None,
    top_k=5,
    normalization="vit",
    outputs_probabilities=False,
    opset=None,
    scratch_dir=None,
):
    """Writes ``model`` in each format of ``paths`` (``{format name: path}``).

    The paths are written as given, without verification or renaming: ``export_model`` is
    the safe entry point and calls this with temporary paths. Needs the TensorFlow backend.

    LiteRT and ONNX are converted from the SavedModel's ``serving_default`` (uint8 images
    -> probabilities and top-k): the exported one if ``"savedmodel"`` is asked for, else one
    written in a hidden scratch folder beside the first path and always removed
    (``scratch_dir``: where to make it instead).

    Example (TensorFlow backend):
    >>> import keras, os, tempfile, keras_vit
    >>> if keras.backend.backend() == "tensorflow":
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    ...     out = tempfile.mkdtemp()
    ...     _ = convert_model(model, {"tflite_float32": os.path.join(out, "m.tflite")})
    """
    import keras

    from keras_vit.export import litert
    from keras_vit.export import onnx as onnx_export
    from keras_vit.export.savedmodel import write_savedmodel

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "convert_model needs the TensorFlow backend (KERAS_BACKEND=tensorflow); got "
            f"{keras.backend.backend()!r}. Use keras_vit.export.export_model, which handles this."
        )
    for name in paths:
        if name not in FORMATS:
            raise ValueError(f"Unknown export format {name!r}; known: {', '.join(FORMATS)}.")
    options = dict(top_k=top_k, normalization=normalization, outputs_probabilities=outputs_probabilities)
    others = [name for name in paths if name != "savedmodel"]
    scratch = None
    try:
        if "savedmodel" in paths:
            source = write_savedmodel(model, paths["savedmodel"], **options)
        else:
            parent = scratch_dir or os.path.dirname(os.path.abspath(paths[others[0]]))
            scratch = tempfile.mkdtemp(prefix=".keras_vit_export_scratch-", dir=parent)
            source = write_savedmodel(model, os.path.join(scratch, "source"), **options)
        # LiteRT and ONNX are converted from the SavedModel's serving_default, so every
        # format has the same inputs, outputs and pre-processing.
        for name in others:
            spec = FORMATS[name]
            if spec.kind == "tflite":
                litert.write_tflite(model, source, paths[name], spec.quantization, representative_images)
            else:
                onnx_export.write_onnx(model, source, paths[name], opset or onnx_export.DEFAULT_OPSET)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return dict(paths)
