"""Another input size for a built model: ``keras_vit.resize(model, image_size)``."""

import keras

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
    if any(getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()):
        raise ValueError("Expected a float model: resize it before quantizing it (model.quantize).")
    spec = model.spec.replace(image_size=image_size)
    resized = rebuild(model, spec)
    source = {variable.path: variable for variable in model.weights}
    for variable in resized.weights:
        value = keras.ops.convert_to_numpy(source[variable.path])
        if variable.path == "position_embedding/embedding":
            value = resample_position_embedding(
                value, spec.grid_size, model.spec.grid_size, spec.num_prefix_tokens, method, antialias
            )
        variable.assign(value)
    return resized
