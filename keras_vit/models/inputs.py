"""What a ViT takes as input, and the clear errors for what it cannot take.

Checked in Python before Keras builds a step function: on JAX an error raised inside one
leaves the model unusable (see ``VisionTransformer.predict``), and the errors Keras and the
backends raise there name their own internals, not the user's images.
"""

import numpy as np


def input_shape(spec):
    """The ``keras.Input`` shape: the spec's image size, or any size in dynamic mode."""
    return ((None, None) if spec.dynamic_image_size else spec.image_size) + (spec.num_channels,)


def check_images(spec, shape):
    """A dynamic-size model's clear error for an image side it cannot take (Keras checks a
    fixed-size model's input shape; sizes unknown to a graph pass unchecked)."""
    if not spec.dynamic_image_size or len(shape) != 4:
        return
    unit = f"one {spec.stride}-pixel patch" + ("" if spec.resnet is None else " (ResNet stride x patch size)")
    for side, size in zip(("height", "width"), shape[1:3]):
        if size is not None and size < spec.stride:
            raise ValueError(f"The image {side} {size} is smaller than {unit}: images of shape {shape}.")
        if size is not None and size % spec.stride:
            raise ValueError(
                f"The image {side} {size} is not a multiple of {unit}: images of shape {shape}; "
                f"expected a {side} of {spec.stride} x n pixels."
            )


def _data_shape(data):
    """The image batch shape of arrays or a ``tf.data`` dataset of ``(images, ...)``; None
    where it cannot be known without reading the data (generators, ``PyDataset``)."""
    spec = getattr(data, "element_spec", None)
    if spec is not None:  # tf.data
        spec = spec[0] if isinstance(spec, tuple) else spec
        shape = getattr(spec, "shape", None)
        return None if shape is None or shape.rank is None else tuple(shape.as_list())
    shape = getattr(data, "shape", None)
    return tuple(shape) if shape is not None else None


def check_data(spec, data):
    """A clear error for images of the wrong rank, channels or size, before any work."""
    _check_dtype(data)
    shape = _data_shape(data)
    if shape is None:
        return
    sides = ("height", "width") if spec.dynamic_image_size else spec.image_size
    expected = f"(batch, {sides[0]}, {sides[1]}, {spec.num_channels})"
    wrong = len(shape) != 4 or shape[-1] not in (None, spec.num_channels)
    if not wrong and not spec.dynamic_image_size:
        wrong = any(got not in (None, want) for got, want in zip(shape[1:3], spec.image_size))
    if wrong:
        hint = "" if spec.dynamic_image_size else " (model.preprocessing makes them from any image)"
        raise ValueError(f"Expected images of shape {expected}{hint}; got shape {shape}.")
    check_images(spec, shape)


def _check_dtype(data):
    """Images are real numbers: uint8 pixels or floats (bool, complex, text are refused)."""
    dtype = getattr(data, "dtype", None)
    if dtype is None:  # tf.data: its element spec's dtype
        spec = getattr(data, "element_spec", None)
        spec = spec[0] if isinstance(spec, tuple) else spec
        dtype = getattr(spec, "dtype", None)
        dtype = getattr(dtype, "as_numpy_dtype", None)
    try:
        kind = np.dtype(dtype).kind if dtype is not None else None
    except TypeError:  # a backend's own dtype object: its tensors are checked by Keras
        return
    if kind is not None and kind not in "fiu":
        raise ValueError(f"Expected images of real numbers (uint8 pixels or floats); got dtype {np.dtype(dtype)}.")
