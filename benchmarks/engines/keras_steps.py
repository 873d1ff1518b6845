"""A Keras model's timed steps, shared by the Keras engines (keras-vit, keras-hub).

Inference is the compiled ``predict_on_batch``; training is ``train_on_batch`` (forward,
backward, AdamW) on one fixed batch of random images and labels.
"""

BACKENDS = ("tensorflow", "jax", "torch")


def backend(engine):
    """``<family>:<backend>[-variant]`` -> the Keras backend of the engine's process."""
    return engine.split(":")[1].split("-")[0]


def compiled_model(build, precision):
    """``build()``'s model under the ``precision`` dtype policy, compiled to train."""
    import keras

    keras.config.set_dtype_policy(precision)
    model = build()
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def batch_of(arch, batch):
    """One batch of random images in [-1, 1] and labels, as NumPy arrays (the same every row)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(batch, arch.image_size, arch.image_size, 3)).astype("float32")
    y = rng.integers(0, 1000, size=(batch,))
    return x, y


def steps(model, x, y, device):
    """``(infer, train)`` on ``model`` (``compiled_model``'s) for the batch ``x``, ``y``."""
    import keras

    if device != "cpu":
        # On an accelerator the inputs wait there, as the PyTorch peers' do: a copy from the
        # host at every step would be timed too.
        x, y = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
    return (lambda: model.predict_on_batch(x)), (lambda: model.train_on_batch(x, y))
