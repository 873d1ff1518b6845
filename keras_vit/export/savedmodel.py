"""TF SavedModel for TF Serving (TensorFlow backend only)."""

from keras_vit.export.serving import build_archive


def write_savedmodel(model, path, *, top_k=5, normalization="vit", outputs_probabilities=False):
    """Writes ``model`` as a SavedModel with ``serving_default`` and ``serving_preprocessed``.

    See ``keras_vit.export.serving.build_archive`` for the signatures. ``path`` is a folder
    that must not exist yet (``export_model`` writes it at a temporary path first).

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

