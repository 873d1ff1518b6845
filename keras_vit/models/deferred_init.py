"""Building a model whose weights a checkpoint is about to replace, without drawing them.

Drawing random initial values costs most of the build of a big ViT (ViT-H/14's 632M
parameters), only for them to be overwritten by the loading that follows. Inside
``deferred_initialization()`` every weight a layer adds starts as zeros (no random
numbers drawn), and its real initializer is kept;
``initialize_unloaded(model, loaded)`` then draws the real values of the weights the
checkpoint did not provide (a new head, say), so the model ends as if built normally.

(HF transformers skips initialisation the same way for its ``from_pretrained``.) The
layers' code is unchanged: ``keras.layers.Layer.add_weight`` is wrapped for the duration
of the block, in this one place.
"""

import contextlib
import threading

import keras

_LOCK = threading.Lock()
_PENDING = "_keras_vit_initializer"  # where each deferred variable keeps its real initializer


@contextlib.contextmanager
def deferred_initialization():
    """Layers built in this block get zero weights and remember their initializers.

    Example:
    >>> import keras, keras_vit
    >>> with deferred_initialization():
    ...     model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=3, depth=1)
    >>> kernel = model.get_layer("block_0").mlp.fc1.kernel
    >>> float(keras.ops.max(keras.ops.abs(kernel)))
    0.0
    >>> initialize_unloaded(model, loaded=[v.path for v in model.weights if "fc1" not in v.path])
    ['block_0/mlp/fc1/kernel', 'block_0/mlp/fc1/bias']
    >>> float(keras.ops.max(keras.ops.abs(kernel))) > 0  # drawn as glorot_uniform would
    True
    """
    add_weight = keras.layers.Layer.add_weight

    def deferred_add_weight(layer, *args, **kwargs):
        if args or "initializer" not in kwargs or kwargs["initializer"] is None:
            return add_weight(layer, *args, **kwargs)  # positional or default forms: as they are
        real = keras.initializers.get(kwargs["initializer"])
        kwargs["initializer"] = "zeros"
        variable = add_weight(layer, *args, **kwargs)
        object.__setattr__(variable, _PENDING, real)
        return variable

    with _LOCK:
        keras.layers.Layer.add_weight = deferred_add_weight
        try:
            yield
        finally:
            keras.layers.Layer.add_weight = add_weight


def initialize_unloaded(model, loaded):
    """Draws the real initial values of ``model``'s deferred weights whose paths are not in
    ``loaded``; returns those paths. Every deferred weight is then an ordinary one."""
    loaded, drawn = set(loaded), []
    for variable in model.weights:
        real = getattr(variable, _PENDING, None)
        if real is None:
            continue
        if variable.path not in loaded:
            variable.assign(real(variable.shape, dtype=variable.dtype))
            drawn.append(variable.path)
        object.__delattr__(variable, _PENDING)
    return drawn
