"""``create_model``'s weights: a preset, a local preset, a checkpoint file or a URL.

Whatever the source, the model is built with the numerics its weights were trained with
(a preset's record, or the file's layout), then ``load_weights`` fills it: position
embeddings resampled for another image size, a fresh head for another class count. A
preset also gives the model its pre-processing and class names; a local preset or a
``.keras`` file has its own.
"""

import os

from keras_vit.models.variants import VARIANTS
from keras_vit.presets import download, local
from keras_vit.presets.catalog import PRESETS, get_preset

# What a weights path ends in (the readers' containers), to tell a missing file from a tag.
CHECKPOINT_EXTENSIONS = (".npz", ".pth", ".pt", ".bin", ".safetensors", ".keras", ".h5")


def is_url(value):
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def resolve(name, weights):
    """``(model name or None, source)`` from ``create_model``'s ``name`` and ``weights``.

    ``source`` is a ``Preset``, a local path (a local preset folder, a ``.keras`` file or
    a checkpoint), a URL, or None (random weights). The model name is None when the
    source holds its own architecture (a local preset, a ``.keras`` file).
    """
    name = os.fspath(name) if isinstance(name, os.PathLike) else name
    weights = os.fspath(weights) if isinstance(weights, os.PathLike) else weights
    named = name in VARIANTS or name in PRESETS  # a name wins over a folder that happens to share it
    if isinstance(name, str) and not named and (os.path.isdir(name) or name.endswith(".keras")):
        if weights is not None:
            raise ValueError(f"{name!r} holds its own weights; weights={weights!r} would be a second source.")
        return None, name
    if isinstance(name, str) and "." in name:
        if weights is not None:
            raise ValueError(
                f"{name!r} is a preset, which names its weights; weights={weights!r} would be a second source. "
                f"Use create_model({name.split('.')[0]!r}, weights=...) to load other weights."
            )
        preset = get_preset(name)
        return preset.model, preset
    if weights is None or is_url(weights) or os.path.exists(weights):
        return name, weights
    looks_like_a_file = os.sep in weights or os.path.splitext(weights)[1] in CHECKPOINT_EXTENSIONS
    if looks_like_a_file:
        raise FileNotFoundError(f"weights={weights!r}: no such file or folder.")
    full = weights if "." in weights else f"{name}.{weights}"
    preset = get_preset(full)
    if preset.model != name:
        raise ValueError(f"The preset {full!r} holds {preset.model!r} weights, not {name!r}.")
    return name, preset


def build(name, weights, dtype, options, own):
    """The model of ``create_model`` when it has weights to load (see ``resolve``), else None.

    ``options`` are ``ViTSpec`` fields; ``own`` the model's ``name``, ``preprocessing`` and
    ``class_names`` where the caller gave them.
    """
    import keras_vit
    from keras_vit.checkpoints.loader import trained_numerics
    from keras_vit.layers.preprocessing import ImagePreprocessing

    model_name, source = resolve(name, weights)
    if source is None:
        return None
    if isinstance(source, str) and (os.path.isdir(source) or source.endswith(".keras")):
        return local.load(source, dtype=dtype, **own, **options)
    own = {"name": model_name, **own}
    if isinstance(source, str):  # a checkpoint file or URL: its layout says how it was trained
        path = download.download(source) if is_url(source) else source
        hybrid = keras_vit.get_spec(model_name).resnet is not None
        spec = keras_vit.get_spec(model_name).replace(**{**trained_numerics(path, hybrid), **options})
        return _built_and_loaded(spec, dtype, own, path)
    spec = source.spec.replace(**options)  # bad options fail before any download
    path = download.download(source.url, sha256=source.sha256, size=source.size)
    own.setdefault("preprocessing", ImagePreprocessing(spec.image_size, **source.preprocessing))
    own.setdefault("class_names", source.labels if spec.num_classes == source.num_classes else None)
    return _built_and_loaded(spec, dtype, own, path)


def _built_and_loaded(spec, dtype, own, path):
    """The model with ``path``'s weights; only what the file lacks is drawn at random."""
    import keras_vit
    from keras_vit.models.deferred_init import deferred_initialization, initialize_unloaded

    with deferred_initialization():
        model = keras_vit.VisionTransformer(spec, dtype=dtype, **own)
    report = keras_vit.load_weights(model, path)
    initialize_unloaded(model, report.loaded)
    return model
