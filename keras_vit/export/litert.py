"""LiteRT (TFLite) flat buffers in four precisions (TensorFlow backend only).

Every variant has one signature, ``serving_default``, the SavedModel's: ``images`` uint8
``(batch, H, W, C)`` in (pre-processing inside); ``probabilities`` float32, ``top_k_scores``
float32 and ``top_k_indices`` int32 out. The full-integer model computes
every layer in int8: the image is cast and quantised once on entry, the probabilities
dequantised once on exit (the converter folds the pre-processing's scaling into that quantisation).
"""

import numpy as np

from keras_vit.dependencies import require
from keras_vit.export.errors import unconvertible

QUANTIZATIONS = ("float32", "float16", "dynamic_int8", "int8")


def convert_tflite(saved_model_dir, quantization="float32", representative_images=None):
    """Converts a SavedModel's ``serving_default`` into TFLite flat-buffer bytes.

    Args:
        saved_model_dir: a SavedModel from ``serving.write_savedmodel``.
        quantization: ``"float32"``; ``"float16"`` (weights stored in float16);
            ``"dynamic_int8"`` (int8 weights, activations quantised at run time); ``"int8"``
            (full integer; calibrated on ``representative_images``).
        representative_images: uint8 ``(N, H, W, C)`` images the model will see (a few
            hundred training images); required for ``"int8"``.

    Only LiteRT's built-in ops are allowed (no TF "flex" ops, which would need the large
    Select-TF-ops runtime): ``write_tflite`` turns an op outside them into an
    ``UnconvertibleModelError`` naming the layer.

    Example (TensorFlow backend):
    >>> import keras, os, tempfile, keras_vit
    >>> from keras_vit.export.serving import write_savedmodel
    >>> if keras.backend.backend() == "tensorflow":
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    ...     source = write_savedmodel(model, os.path.join(tempfile.mkdtemp(), "sm"))
    ...     flat_buffer = convert_tflite(source, "dynamic_int8")
    ...     assert flat_buffer[4:8] == b"TFL3"
    """
    tf = require("tensorflow", "export")

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"Expected a quantization in {QUANTIZATIONS}; got {quantization!r}.")
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir, signature_keys=["serving_default"])
    if quantization != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantization == "int8":
        if representative_images is None or len(representative_images) == 0:
            raise ValueError("Full-integer int8 needs representative_images (uint8, N x H x W x C); got none.")
        images = np.asarray(representative_images)

        def representative_dataset():
            # One image per step: calibration records min/max per tensor, batch size
            # does not change them, and the graph's batch dimension stays dynamic.
            for image in images:
                yield [image[None]]

        converter.representative_dataset = representative_dataset
        # Only int8 kernels: conversion fails instead of silently leaving a float op.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    else:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


def write_tflite(model, saved_model_dir, path, quantization="float32", representative_images=None):
    """Converts (see ``convert_tflite``) and writes the flat buffer to ``path``.

    ``model`` is the Keras model the SavedModel was made from; it is only used to name the
    layers in an ``UnconvertibleModelError``.
    """
    try:
        content = convert_tflite(saved_model_dir, quantization, representative_images)
    except (ValueError, TypeError):
        raise
    except Exception as error:
        message = str(error)
        raise unconvertible(
            f"tflite_{quantization}",
            model,
            lambda what, ops: (
                f"tflite_{quantization}: LiteRT cannot convert {what}"
                + (f" (unsupported ops: {', '.join(ops)})" if ops else "")
                + f". Converter message: {_first_lines(message)}"
            ),
            message,
        ) from None
    with open(path, "wb") as f:
        f.write(content)
    return path


def _first_lines(text, limit=600):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + " ..."
