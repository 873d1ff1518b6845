"""Building a model whose weights a checkpoint is about to replace, without drawing them.

Drawing random initial values costs most of the build of a big ViT (ViT-H/14's 632M
parameters), only for them to be overwritten by the loading that follows. Inside
``deferred_initialization()`` every weight of the layers keras-vit makes starts as zeros
(no random numbers drawn), and its real initializer is kept;
``initialize_unloaded(model, loaded)`` then draws the real values of the weights the
checkpoint did not provide (a new head, say), so the model ends as if built normally.

(HF transformers skips initialisation the same way for its ``from_pretrained``.) The
layers take their initializers through ``keras_vit.layers.initializers``, whose block
is this thread's own: Keras is not patched, the layers' configs are unchanged, and a model
built in another thread meanwhile draws its weights as usual.
"""

import contextlib

from keras_vit.layers import initializers


@contextlib.contextmanager
def deferred_initialization():
    """The layers keras-vit makes in this block get zero weights and remember their initializers.

    Examples:
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
    with initializers.deferring():
        yield


def initialize_unloaded(model, loaded):
    """Draws the real initial values of ``model``'s deferred weights whose paths are not in
    ``loaded``; returns those paths. Every deferred weight is then an ordinary one."""
    loaded, drawn = set(loaded), []
    for variable in model.weights:
        real = initializers.take_deferred(variable)
        if real is None:
            continue
        if variable.path not in loaded:
            variable.assign(real(variable.shape, dtype=variable.dtype))
            drawn.append(variable.path)
    return drawn
