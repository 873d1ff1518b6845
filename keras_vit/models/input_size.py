"""Another input size for a built model (``keras_vit.resize(model, image_size)``), and the
weight copy it makes, which fine-tuning also uses."""

import keras
import numpy as np

from keras_vit.internals import sublayers
from keras_vit.models.rebuild import rebuild
from keras_vit.models.vit import VisionTransformer
from keras_vit.resampling import resample_position_embedding


def resize(model, image_size, method="bicubic", antialias=True):
    """The same model at another input size, square or not, ready to fine-tune or export.

    The position embeddings are resampled from the model's patch grid to the new one
    (class token kept apart), by default as timm's ``resample_abs_pos_embed`` does; every
    other weight is copied. The pre-processing follows the new size; the class names stay.

    Args:
        model: a ``keras_vit.VisionTransformer`` (not quantized: resize first, then quantize).
        image_size: the new side or ``(height, width)``, divisible by the model's stride.
        method: ``"bicubic"``, ``"bilinear"`` or ``"nearest"``.
        antialias: antialias when the grid shrinks.

    Examples:
        >>> import keras_vit
        >>> model = keras_vit.create_model("vit_ti16", image_size=32, num_classes=3, depth=1)
        >>> keras_vit.resize(model, (32, 64)).spec.grid_size
        (2, 4)
    """
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"Expected a keras_vit.VisionTransformer; got a {type(model).__name__}.")
    if any(getattr(layer, "quantization_mode", None) for layer in sublayers(model)):
        raise ValueError("Expected a float model: resize it before quantizing it (model.quantize).")
    spec = model.spec.replace(image_size=image_size)
    if model.spec.relative_position_bias and spec.grid_size != model.spec.grid_size:
        raise ValueError(
            f"This model's attention has relative position bias tables for its {model.spec.grid_size} grid; "
            f"resampling them to {spec.grid_size} is not built yet."
        )
    resized = rebuild(model, spec)
    copy_weights(model, resized, method=method, antialias=antialias)
    return resized


def copy_weights(source, target, exclude=(), method="bicubic", antialias=True):
    """Gives each weight of ``target`` the value of ``source``'s weight of the same path, the
    position embeddings resampled to ``target``'s patch grid (both ``VisionTransformer``).

    Weights whose path starts with one of ``exclude`` (``("head/",)``) keep their values, as
    do those ``source`` lacks: their paths are returned, to refuse or to accept. Where
    ``target`` adds DeiT's distillation token, its position starts as the class token's.

    Examples:
        >>> import keras_vit
        >>> small = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=1)
        >>> big = keras_vit.create_model("vit_ti16", image_size=32, num_classes=3, depth=1)
        >>> copy_weights(small, big, exclude=("head/",))
        []
    """
    values = {variable.path: variable for variable in source.weights}
    lacking = []
    for variable in target.weights:
        if variable.path.startswith(tuple(exclude)):
            continue
        if variable.path not in values:
            lacking.append(variable.path)
            continue
        value = keras.ops.convert_to_numpy(values[variable.path])
        if variable.path == "position_embedding/embedding":
            value = _with_distillation_position(value, source.spec, target.spec)
        # By grid, not by shape: a 6x10 table and a 10x6 one have the same shape.
        if variable.path == "position_embedding/embedding" and source.spec.grid_size != target.spec.grid_size:
            value = resample_position_embedding(
                value, target.spec.grid_size, source.spec.grid_size, target.spec.position_prefix_rows, method, antialias
            )
        variable.assign(value)
    return lacking


def _with_distillation_position(table, source, target):
    """``table`` (``(1, rows, width)``) with a row for the distillation token where ``target``
    has the token in its table and ``source`` not: after the class token's row and a copy of
    it, or first and zero where there is no class token."""
    added = target.distillation_token and not source.distillation_token
    if not (added and target.position_prefix_rows == source.position_prefix_rows + 1):
        return table
    at = int(source.has_class_token)
    row = table[:, :1] if at else np.zeros_like(table[:, :1])
    return np.concatenate([table[:, :at], row, table[:, at:]], axis=1)
