"""Initial values a model build may defer: zeros now, the real ones drawn later.

Inside ``deferring()`` (``keras_vit.models.deferred_init.deferred_initialization``) the
weights of the layers keras-vit makes start as zeros, and each keeps its real initializer
for ``take_deferred``. Two doors, both in keras-vit's own code, none in Keras':

* ``deferrable(layer)`` for the Keras layers keras-vit constructs (``Dense``,
  ``LayerNormalization``, ``GroupNormalization``): until the block ends, each of the
  layer's ``<weight>_initializer`` attributes (Keras' naming) is a ``DeferredInitializer``
  holding the real one; when it ends, the layer gets its own back, so its config never
  records a deferred one, and each weight it built remembers its real initializer.
* ``deferrable_weight(self, ...)`` in place of ``self.add_weight(...)`` for the weights
  keras-vit's layers add themselves.

The block is a ``contextvars.ContextVar``, so it is this thread's (or asyncio task's)
alone: a model built elsewhere meanwhile draws its weights as usual.
"""

import contextlib
import contextvars

import keras

from keras_vit.internals import del_untracked, set_untracked

# The layers given deferred initializers in the open block; None outside one.
_OPEN = contextvars.ContextVar("keras_vit_deferring", default=None)
_SUFFIX = "_initializer"
_REAL = "_keras_vit_initializer"  # where a deferred weight keeps its real initializer


class DeferredInitializer(keras.initializers.Initializer):
    """Zeros, standing in for ``real``, whose values are drawn once it is known which
    weights a checkpoint does not provide.

    >>> deferred = DeferredInitializer("glorot_uniform")
    >>> keras.ops.convert_to_numpy(deferred((2, 2))).tolist(), type(deferred.real).__name__
    ([[0.0, 0.0], [0.0, 0.0]], 'GlorotUniform')
    """

    def __init__(self, real):
        self.real = keras.initializers.get(real)
        self.used = False

    def __call__(self, shape, dtype=None):
        self.used = True
        return keras.initializers.Zeros()(shape, dtype=dtype)

    def get_config(self):
        return {"real": keras.initializers.serialize(self.real)}


@contextlib.contextmanager
def deferring():
    """The block in which the layers keras-vit makes start with zero weights."""
    layers = []
    token = _OPEN.set(layers)
    try:
        yield
    finally:
        _OPEN.reset(token)
        for layer in layers:
            _settle(layer)


def deferrable(layer):
    """``layer``; inside the block, its weights start as zeros if it is built there.

    For a Keras layer that keras-vit constructs; it reads its initializers, by Keras'
    naming, from its ``<weight>_initializer`` attributes.
    """
    layers = _OPEN.get()
    if layers is None or layer.built:
        return layer
    named = [
        name
        for name, value in vars(layer).items()
        if name.endswith(_SUFFIX)
        and isinstance(value, keras.initializers.Initializer)
        and not isinstance(value, DeferredInitializer)
    ]
    for name in named:
        setattr(layer, name, DeferredInitializer(getattr(layer, name)))
    if named:
        layers.append(layer)
    return layer


def deferrable_weight(layer, *, initializer, **kwargs):
    """``layer.add_weight(initializer=initializer, **kwargs)``; inside the block, the weight
    starts as zeros and keeps ``initializer``. For the weights keras-vit's layers add."""
    if _OPEN.get() is None or isinstance(initializer, DeferredInitializer):
        return layer.add_weight(initializer=initializer, **kwargs)
    deferred = DeferredInitializer(initializer)
    variable = layer.add_weight(initializer=deferred, **kwargs)
    set_untracked(variable, _REAL, deferred.real)
    return variable


def take_deferred(variable):
    """The real initializer of a weight that started as zeros in the block and has not
    been drawn, else None; the weight is an ordinary one afterwards."""
    real = getattr(variable, _REAL, None)
    if real is not None:
        del_untracked(variable, _REAL)
    return real


def _settle(layer):
    # The layer's own initializers back (its config is as if built outside the block); each
    # weight that a deferred one made, found by Keras' naming, keeps the real one.
    for name, value in list(vars(layer).items()):
        if not isinstance(value, DeferredInitializer):
            continue
        setattr(layer, name, value.real)
        if value.used:
            variable = getattr(layer, name[: -len(_SUFFIX)], None)
            if not isinstance(variable, keras.Variable):
                raise RuntimeError(
                    f"{type(layer).__name__} {layer.name!r} built a weight with its {name} but has no "
                    f"{name[: -len(_SUFFIX)]!r} variable: deferrable() cannot tell which weight it is."
                )
            set_untracked(variable, _REAL, value.real)
