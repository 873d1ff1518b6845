"""Checking and loading the model file an export starts from, on any backend."""

import os

from keras_vit.export.errors import InvalidModelFileError


def check_model_file(path, model_name=None):
    """Checks, without loading it, that ``path`` is a model file export can start from.

    Returns its container (``"keras"`` for a ``.keras`` model, ``"keras_weights"`` for
    ``.weights.h5``, else a checkpoint container such as ``"npz"`` or ``"safetensors"``).
    A checkpoint holds weights only, so it needs ``model_name`` (a ``create_model`` name)
    to build the architecture into.

    >>> import os, tempfile
    >>> bad = os.path.join(tempfile.mkdtemp(), "model.keras")
    >>> _ = open(bad, "w").write("not a model")
    >>> try:
    ...     check_model_file(bad)
    ... except InvalidModelFileError as error:
    ...     print("is not a model file" in str(error))
    True
    """
    from keras_vit.checkpoints.readers import sniff_container

    path = os.fspath(path)
    if not os.path.isfile(path):
        what = "a folder" if os.path.isdir(path) else "nothing"
        raise InvalidModelFileError(
            f"Expected a model file (.keras, or a checkpoint with a model name); {path} is {what}."
        )
    try:
        container = sniff_container(path)
    except (ValueError, OSError) as error:
        raise InvalidModelFileError(
            f"{path} is not a model file keras-vit can export: expected a .keras model or a "
            f"checkpoint that keras_vit.load_weights reads. ({error})"
        ) from None
    except Exception as error:  # e.g. zipfile.BadZipFile from a truncated file
        raise InvalidModelFileError(f"{path} is not a model file keras-vit can export: {error}") from None
    if container != "keras" and not model_name:
        raise InvalidModelFileError(
            f"{path} holds weights only ({container}); give the architecture to build them "
            "into: model_name=... (--model NAME, one of keras_vit.list_models())."
        )
    if model_name:
        from keras_vit.models.registry import get_config

        get_config(model_name)  # unknown names fail here, with suggestions
    return container


def load_model_file(path, model_name=None, image_size=None, num_classes=None, **model_kwargs):
    """Loads a ``.keras`` model, or builds ``model_name`` and loads a checkpoint into it.

    Args:
        path: a ``.keras`` file written on any backend, or a checkpoint that
            ``keras_vit.load_weights`` reads (original ``.npz``, timm, HF, ``.weights.h5``).
        model_name: the ``create_model`` name; required for checkpoints, and for a
            ``.keras`` file only to rebuild it (ignored otherwise).
        image_size: build at this input size (position embeddings are resampled); default:
            the ``.keras`` model's own size, or 224 for a checkpoint.
        num_classes: classifier size when building from a checkpoint (default 1000).
        **model_kwargs: further ``create_model`` options for checkpoints
            (e.g. ``gelu_approximate=False`` for timm weights).

    A checkpoint that leaves any weight freshly initialised (e.g. a 1000-class head loaded
    into a 10-class model) is an error here: exporting random weights is never intended.

    Example:
    >>> import os, tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
    >>> keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1).save(path)
    >>> load_model_file(path).input_shape
    (None, 16, 16, 3)
    """
    import keras

    import keras_vit  # registers the custom layers for deserialisation
    from keras_vit.checkpoints import load_weights

    container = check_model_file(path, model_name)
    if container == "keras":
        model = keras.saving.load_model(path, compile=False)
        size = None if image_size is None else _pair(image_size)
        if size is None or tuple(model.input_shape[1:3]) == size:
            return model
        if not isinstance(model, keras_vit.VisionTransformer):
            raise InvalidModelFileError(
                f"image_size={image_size} differs from the model's {model.input_shape[1:3]}, and "
                f"only keras-vit models can be rebuilt at another size; {path} holds a "
                f"{type(model).__name__}. Leave image_size unset."
            )
        config = dict(model.get_config(), image_size=size)
        resized = keras_vit.VisionTransformer.from_config(config)
        load_weights(resized, path)
        return resized
    kwargs = dict(model_kwargs)
    kwargs["image_size"] = 224 if image_size is None else image_size
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    model = keras_vit.create_model(model_name, **kwargs)
    if container == "keras_weights":
        model.load_weights(path)
        return model
    report = load_weights(model, path)
    if report.fresh:
        raise InvalidModelFileError(
            f"{path} has no weights for {', '.join(report.fresh)} of a {model_name} with "
            f"{kwargs.get('num_classes', 1000)} classes ({'; '.join(report.fresh.values())}); an "
            "export would contain random weights. Give the checkpoint's own num_classes."
        )
    return model


def _pair(size):
    return (int(size), int(size)) if isinstance(size, int) else tuple(int(s) for s in size)
