"""Running a built sublayer's computation without Keras' per-call bookkeeping."""


def call_inline(layer, *args, **kwargs):
    """``layer.call(*args, **kwargs)``, from inside the owning layer's ``call``.

    Keras' ``Layer.__call__`` converts the inputs, binds the call signature, resolves
    ``training`` and masks and opens name and autocast scopes. In eager PyTorch that costs
    about 0.1 ms a call, more than a LayerNorm on one image, and an encoder block made 14
    such calls: at batch 1 the bookkeeping, not the arithmetic, set the latency. Compiled
    steps (``tf.function``, ``jax.jit``) pay it once, at trace time, so nothing changes
    there.

    This is exact only for sublayers that
    - the owner built in its ``build``, parameterless ones too: Keras' ``predict_on_batch``
      reruns the whole model eagerly while any layer reports itself unbuilt;
    - share the owner's dtype policy (the owner's autocast scope is already open) or create
      their variables with ``autocast=False``, as Keras' norms and ``StdConv2D`` do;
    - get ``training`` passed explicitly and use no masks.
    The parts of an encoder block or a ResNet unit are such layers. Quantized and
    rematerialised layers take the full ``__call__``, which dispatches them. Tests compare
    both paths in float32 and mixed_bfloat16.

    >>> import keras, numpy as np
    >>> dense = keras.layers.Dense(2)
    >>> dense.build((1, 3))
    >>> x = np.ones((1, 3), "float32")
    >>> bool(np.allclose(keras.ops.convert_to_numpy(call_inline(dense, keras.ops.convert_to_tensor(x))),
    ...                  keras.ops.convert_to_numpy(dense(x))))
    True
    """
    if layer.quantization_mode is not None or getattr(layer, "_remat_mode", None) is not None:
        return layer(*args, **kwargs)
    return layer.call(*args, **kwargs)
