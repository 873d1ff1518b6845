"""The builder: a ``ModelSource`` (``resolve``'s answer) made into a Keras model, its weights loaded.

A source with a spec is built as a ``VisionTransformer`` of that spec with the options
given (bad options fail before any download), then its weights file is fetched and read by
``keras_vit.load_weights`` (position embeddings resampled for another image size, a fresh
head for another class count); only what the file lacks is drawn at random. A ``.keras``
file or a local preset holds its own architecture: Keras loads it, and it is rebuilt only
if the options change it.
"""

import keras

from keras_vit import checks
from keras_vit.checkpoints import load_weights
from keras_vit.checkpoints.readers import unsafe_keras_message
from keras_vit.layers.preprocessing import ImagePreprocessing
from keras_vit.models import masked_patches  # noqa: F401  (registers its classes, which .keras files name)
from keras_vit.models.deferred_init import deferred_initialization, initialize_unloaded
from keras_vit.models.image_text import ImageTextModel
from keras_vit.models.rebuild import rebuild
from keras_vit.models.registry import MODEL_ARGUMENTS
from keras_vit.models.vit import VisionTransformer
from keras_vit.sources.description import CHECKPOINT, InvalidModelFileError
from keras_vit.sources.pair import build_pair

# What of a source to build: its image tower, what it holds (an image-text source's pair), or
# the pair, which a source without a text tower is refused for.
TOWERS = ("image", None, "pair")


def build(
    source, image_size=None, num_classes=None, *, tower="image", dtype=None, safe_mode=True, strict=False, **options
):
    """The model ``source`` describes, at ``image_size`` with ``num_classes`` and ``options``.

    Args:
        source: a ``ModelSource``.
        tower: ``"image"``: the image tower (an image-text source's too, as a classifier
            whose head is its projection); None: what the source holds, an image-text
            source's ``ImageTextModel`` (both towers, the tokenizer, the scale and bias);
            ``"pair"``: that, and an ``InvalidModelFileError`` for a source without a text tower.
        image_size, num_classes, dtype, **options: as ``keras_vit.create_model`` takes them
            (``ViTSpec`` fields, the model's ``name``, ``preprocessing``, ``class_names``).
        safe_mode: refuse what could run code while loading (a ``Lambda`` layer, a PyTorch
            pickle holding more than tensors).
        strict: refuse a checkpoint that would leave weights drawn at random (``load_model``);
            otherwise they are drawn, with a warning (``create_model``, to fine-tune).

    >>> from keras_vit.sources.resolver import resolve
    >>> build(resolve("vit_ti16"), 32, 10, depth=1).output_shape
    (None, 10)
    """
    if tower not in TOWERS:
        raise ValueError(f"tower must be one of {TOWERS}; got {tower!r}.")
    model = _image_model(source, image_size, num_classes, dtype, safe_mode, strict, options)
    if isinstance(model, ImageTextModel):  # a .keras file of a pair
        return model.image_encoder if tower == "image" else model
    if tower == "pair" and source.text is None:
        raise InvalidModelFileError(
            f"{source.given} holds an image model and no text tower: an image-text model (CLIP, SigLIP) is a "
            "transformers clip or siglip repository, open_clip's layout, or a .keras file of one."
        )
    if tower == "image" or source.text is None:
        return model
    return build_pair(source, model, dtype=dtype, safe_mode=safe_mode)


def _image_model(source, image_size, num_classes, dtype, safe_mode, strict, options):
    """The image model of ``source`` (``build``'s, its arguments as ``build`` takes them)."""
    own = {k: options.pop(k) for k in MODEL_ARGUMENTS if k in options}
    # timm's convention: 0 classes is the pooled features and no head; a count, a head of it.
    task = {k: v for k, v in dict(image_size=image_size, num_classes=num_classes or None).items() if v is not None}
    if num_classes is not None:
        task["include_top"] = num_classes != 0
    options = {**task, **options}  # an option given outright (include_top=False) wins
    if source.spec is None and source.kind == CHECKPOINT:
        raise InvalidModelFileError(
            f"{source.given} holds weights only ({source.weights.container}); give the architecture to build "
            "them into: model_name=... (--model NAME, one of keras_vit.list_models())."
        )
    if source.spec is None:
        return _adapted(source.weights.path, dtype, safe_mode, own, options)
    spec = source.spec.replace(**options)
    own.setdefault("name", source.name)
    if source.preprocessing is not None:
        own.setdefault("preprocessing", ImagePreprocessing(spec.image_size, **source.preprocessing))
    if source.class_names is not None:
        same_head = spec.include_top and spec.num_classes == source.num_classes
        own.setdefault("class_names", source.class_names if same_head else None)
    if source.weights is None:
        return VisionTransformer(spec, dtype=dtype, **own)
    path = source.weights.fetch()
    with deferred_initialization():  # the file's weights replace them: not drawn at random
        model = VisionTransformer(spec, dtype=dtype, **own)
    if source.weights.container == "keras_weights" and strict:
        model.load_weights(path)
        initialize_unloaded(model, [v.path for v in model.weights])
        return model
    report = load_weights(model, source.weights.checkpoint or path, safe_mode=safe_mode)
    initialize_unloaded(model, report.loaded)
    if strict and report.fresh:
        raise InvalidModelFileError(
            f"{path} has no weights for {', '.join(report.fresh)} of a {source.name} with "
            f"{model.spec.num_classes} classes ({'; '.join(report.fresh.values())}); they "
            "would stay random. Give the checkpoint's own num_classes (to fine-tune, build the "
            "model and call keras_vit.load_weights)."
        )
    return model


def load_keras_file(path, safe_mode=True):
    """The model in a ``.keras`` file, not compiled; keras-vit's classes are registered above."""
    try:
        return keras.saving.load_model(path, compile=False, safe_mode=safe_mode)
    except ValueError as error:
        if "safe_mode" not in str(error):
            raise
        raise InvalidModelFileError(unsafe_keras_message(path)) from None


def _adapted(path, dtype, safe_mode, own, options):
    """The ``.keras`` model at ``path``, rebuilt if ``options``, ``dtype`` or its own
    arguments (``own``) change it; its weights loaded into the rebuilt one."""
    base = load_keras_file(path, safe_mode)
    if "image_size" in options:
        options["image_size"] = checks.pair(options["image_size"])
    if not isinstance(base, VisionTransformer):  # a Keras model of its own: as it is
        changes = {**options, **own}
        if "image_size" in changes and changes["image_size"] == _input_size(base):
            del changes["image_size"]  # its own size: no change
        if changes or dtype:
            raise InvalidModelFileError(
                f"{path} holds a {type(base).__name__}, which keras-vit cannot rebuild with changes "
                f"({', '.join(sorted(changes)) or 'dtype'}); leave them out to load it as it is."
            )
        return base
    spec = base.spec.replace(**options)
    unchanged = all(own.get(k, getattr(base, k)) == getattr(base, k) for k in ("name", "preprocessing", "class_names"))
    if spec == base.spec and dtype is None and unchanged:
        return base
    model = rebuild(base, spec, dtype, **own)
    load_weights(model, path, safe_mode=safe_mode)
    return model


def _input_size(model):
    """``(height, width)`` of a functional model's image input; None for a model without one."""
    try:
        return tuple(model.input_shape[1:3])
    except (AttributeError, TypeError, ValueError):  # a subclassed model has no input_shape
        return None
