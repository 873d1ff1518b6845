"""The serving signatures every export is made from, and the SavedModel (TensorFlow backend).

The exported graphs take what a client has, raw ``uint8`` images, and do the model's
pre-processing inside, so that no client can get it wrong: a served ViT fed 0..255
pixels instead of [-1, 1] still answers, only wrongly. That pre-processing is the model's
own ``model.preprocessing`` layer (resize, crop, normalise, as it was evaluated) when it
has one, else the scaling named by ``normalization``. The SavedModel written here is the
TF Serving export and the source LiteRT and ONNX are converted from.
"""

import keras

from keras_vit.dependencies import require
from keras_vit.export.errors import unconvertible

DEFAULT_SIGNATURE = "serving_default"
PREPROCESSED_SIGNATURE = "serving_preprocessed"
BYTES_SIGNATURE = "serving_bytes"


def image_spec(model):
    """``(height, width, channels)`` of the model's image input, checked to be one NHWC input.

    A dynamic-size model (``dynamic_image_size=True``) takes any size; this is the size its
    position embeddings are stored for, which the raw-image signature serves.
    """
    shape = model.input_shape
    spec = getattr(model, "spec", None)
    if getattr(spec, "dynamic_image_size", False) and not isinstance(shape, list) and len(shape) == 4:
        shape = (shape[0], *spec.image_size, shape[3])
    if isinstance(shape, list) or len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            "Expected a model with one image input of fixed shape (batch, height, width, "
            f"channels); got input_shape={shape}."
        )
    outputs = model.output_shape
    if isinstance(outputs, list) or len(outputs) != 2:
        raise ValueError(
            "Expected a classifier with one (batch, num_classes) output to serve probabilities; "
            f"got output_shape={outputs} (build the model with include_top=True)."
        )
    return tuple(int(s) for s in shape[1:])


def serving_preprocessing(model, normalization="vit"):
    """The layer the raw-image signature applies: the model's own, else one for ``normalization``.

    ``model.preprocessing`` (a ``keras_vit.layers.ImagePreprocessing``) takes precedence:
    ``normalization`` (one of ``keras_vit.data.NORMALIZATIONS``) only serves a model
    without one, as ``ImagePreprocessing.from_normalization`` at the model's image size
    (on images of that size, only the scaling). Either way its output size must be the
    model's input size.

    >>> import keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    >>> serving_preprocessing(model, "imagenet").image_size
    (16, 16)
    """
    from keras_vit.layers.preprocessing import ImagePreprocessing

    height, width, _ = image_spec(model)
    layer = getattr(model, "preprocessing", None)
    if layer is None:
        return ImagePreprocessing.from_normalization(normalization, (height, width))
    if tuple(layer.image_size) != (height, width):
        raise ValueError(
            f"The model's pre-processing outputs {tuple(layer.image_size)} images but the model takes "
            f"{(height, width)}; give model.preprocessing the model's image size."
        )
    return layer


def _scores_to_outputs(tf, scores, outputs_probabilities, top_k):
    scores = tf.cast(scores, tf.float32)  # mixed-precision models answer in float32 too
    probabilities = scores if outputs_probabilities else tf.nn.softmax(scores, axis=-1)
    outputs = {"probabilities": probabilities}
    if top_k:
        top = tf.math.top_k(probabilities, k=top_k)
        outputs["top_k_scores"] = top.values
        outputs["top_k_indices"] = top.indices
    return outputs


def build_archive(
    model,
    *,
    top_k=5,
    normalization="vit",
    outputs_probabilities=False,
    preprocessed_signature=True,
    bytes_signature=True,
):
    """A ``keras.export.ExportArchive`` with the serving signatures of ``model``.

    - ``serving_default``: ``images`` uint8 ``(batch, H, W, C)`` at the model's input size
      -> ``probabilities`` float32 ``(batch, classes)``, ``top_k_scores`` float32 and
      ``top_k_indices`` int32 ``(batch, k)`` (top-k left out when ``top_k`` is 0). The
      images go through ``serving_preprocessing(model, normalization)``.
    - ``serving_preprocessed`` (if ``preprocessed_signature``): the same from float32
      images already pre-processed as the model expects. A dynamic-size model's takes any
      height and width that are positive multiples of its stride (checked in the graph).
    - ``serving_bytes`` (if ``bytes_signature``): ``image_bytes`` string ``(batch,)``, each
      an encoded JPEG, PNG, GIF or BMP of any size (TF Serving's REST API takes them as
      ``{"b64": ...}``), decoded to the model's channels and put through the same
      pre-processing image by image, as ``model.classify`` does; the outputs above plus
      ``top_k_names`` string ``(batch, k)``: the model's ``class_names`` (the indices as
      text for a model without them).

    Args:
        model: a Keras model on the TensorFlow backend.
        top_k: how many classes the top-k outputs hold (capped at the number of classes).
        normalization: the pre-processing of a model without its own ``model.preprocessing``
            (which takes precedence), one of ``keras_vit.data.NORMALIZATIONS``
            (``"vit"``: ``x / 127.5 - 1``).
        outputs_probabilities: the model already ends in a softmax (else it outputs logits).

    Example (TensorFlow backend):
    >>> import keras, keras_vit
    >>> if keras.backend.backend() == "tensorflow":
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    ...     archive = build_archive(model, top_k=2)
    """
    tf = require("tensorflow", "export")

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "build_archive needs the TensorFlow backend (KERAS_BACKEND=tensorflow); got "
            f"{keras.backend.backend()!r}. keras_vit.export.export_model handles other backends."
        )
    height, width, channels = image_spec(model)
    preprocessing = serving_preprocessing(model, normalization)
    num_classes = int(model.output_shape[-1])
    top_k = min(int(top_k), num_classes)

    spec = getattr(model, "spec", None)
    stride = spec.stride if getattr(spec, "dynamic_image_size", False) else None

    def serve_preprocessed(images):
        if stride is not None:
            images = _checked_sides(tf, images, stride)
        return _scores_to_outputs(tf, model(images, training=False), outputs_probabilities, top_k)

    def serve_raw(images):
        # A signature call does not check the static shape: an image of another size or
        # channel count is refused here, naming the expected shape, instead of failing (or,
        # in a runtime that resizes its input, folding into extra rows) deep in the model.
        images = tf.ensure_shape(images, (None, height, width, channels))
        return serve_preprocessed(preprocessing(images))

    names = _class_names(model, num_classes)

    def serve_bytes(image_bytes):
        def one(encoded):
            # expand_animations=False: a GIF gives its first frame, as PIL opens it.
            image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
            image.set_shape((None, None, channels))
            return preprocessing(image[None])[0]

        decoded = tf.TensorSpec((height, width, channels), preprocessing.compute_dtype)
        images = tf.map_fn(one, image_bytes, fn_output_signature=decoded)
        outputs = serve_preprocessed(images)
        if top_k:
            outputs["top_k_names"] = tf.gather(tf.constant(names), outputs["top_k_indices"])
        return outputs

    archive = keras.export.ExportArchive()
    archive.track(model)
    image_batch = (None, height, width, channels)
    endpoints = [(DEFAULT_SIGNATURE, serve_raw, tf.TensorSpec(image_batch, tf.uint8, name="images"))]
    if preprocessed_signature:
        sides = (None, None) if stride is not None else (height, width)
        spec = tf.TensorSpec((None, *sides, channels), tf.float32, name="images")
        endpoints.append((PREPROCESSED_SIGNATURE, serve_preprocessed, spec))
    if bytes_signature:
        endpoints.append((BYTES_SIGNATURE, serve_bytes, tf.TensorSpec((None,), tf.string, name="image_bytes")))
    for name, fn, spec in endpoints:
        try:
            archive.add_endpoint(name, fn, input_signature=[spec])
        except Exception as error:
            # Tracing runs every layer's call() on symbolic TF tensors: a layer written
            # with another backend's own ops (jax.numpy, torch) fails here.
            raise unconvertible(
                "savedmodel",
                model,
                lambda what, ops, name=name, error=error: (
                    f"TensorFlow could not trace {what} for the {name} signature; every "
                    f"layer must be written with keras.ops (not jax.numpy or torch) to export. ({error})"
                ),
                str(error),
            ) from error
    return archive


def _class_names(model, num_classes):
    """The model's class names as text, or each class's index where it has none."""
    names = getattr(model, "class_names", None)
    return [str(name) for name in names] if names is not None else [str(i) for i in range(num_classes)]


def _checked_sides(tf, images, stride):
    """``images``, once the graph has checked that each side is a positive multiple of
    ``stride`` (a served dynamic-size model; Keras' own check sees only static sizes)."""
    sides = tf.shape(images)[1:3]
    message = f"image height and width must be positive multiples of {stride} pixels (one patch of this model)"
    checks = [
        tf.debugging.assert_equal(sides % stride, 0, message=message),
        tf.debugging.assert_greater_equal(sides, stride, message=message),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(images)


def write_savedmodel(model, path, *, top_k=5, normalization="vit", outputs_probabilities=False):
    """Writes ``model`` as a SavedModel with the ``build_archive`` signatures; returns ``path``.

    ``path`` is a folder that must not exist yet (``export_model`` writes it at a temporary
    path first). ``normalization`` serves only a model without its own ``model.preprocessing``.

    Example (TensorFlow backend):
    >>> import keras, os, tempfile, keras_vit
    >>> if keras.backend.backend() == "tensorflow":
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    ...     _ = write_savedmodel(model, os.path.join(tempfile.mkdtemp(), "savedmodel"))
    """
    archive = build_archive(
        model, top_k=top_k, normalization=normalization, outputs_probabilities=outputs_probabilities
    )
    archive.write_out(path, verbose=False)
    return path
