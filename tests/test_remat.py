"""Rematerialised encoder blocks (``ViTSpec.remat``): the same function, the same training step,
dropout included (its masks replayed in the recomputation: keras_vit/layers/remat.py).

The memory it saves and the time it costs are the benchmark's (benchmarks/remat_memory.py;
its quick mode runs in tests/test_benchmarks.py).
"""

import collections
import functools
import re

import keras
import numpy as np
import pytest
from helpers import assert_close_to_scale, to_numpy

import keras_vit
from keras_vit.layers import EncoderBlock, MlpBlock, MultiHeadSelfAttention

BACKEND = keras.backend.backend()
TINY = dict(image_size=16, patch_size=4, depth=2, hidden_size=32, num_heads=2, mlp_dim=64, num_classes=3)
# The same operations in another order of evaluation at most: float32 rounding.
RTOL = 1e-5


def _one_step(remat, dropout_rate, x, y):
    keras.utils.set_random_seed(0)
    model = keras_vit.create_model("vit_ti16", remat=remat, dropout_rate=dropout_rate, head_zero_init=False, **TINY)
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = {w.path: to_numpy(w) for w in model.trainable_weights}
    loss = float(to_numpy(model.train_on_batch(x, y)))
    return model, loss, before


@pytest.mark.parametrize("dropout_rate", [0.0, 0.1], ids=["no dropout", "dropout"])
def test_a_rematerialised_model_takes_the_same_training_step(dropout_rate, rng):
    x = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    y = np.array([0, 1, 2, 1])
    plain, plain_loss, start = _one_step(False, dropout_rate, x, y)
    remat, remat_loss, remat_start = _one_step(True, dropout_rate, x, y)
    assert all(np.array_equal(start[p], remat_start[p]) for p in start)  # the same weights to start from
    assert remat_loss == pytest.approx(plain_loss, rel=RTOL)
    if dropout_rate:  # the masks were drawn (and drawn alike): the step is not the one without
        _, undropped_loss, _ = _one_step(False, 0.0, x, y)
        assert abs(undropped_loss - plain_loss) > 1e-3 * abs(plain_loss), (undropped_loss, plain_loss)
    expected = {w.path: to_numpy(w) for w in plain.trainable_weights}
    for weight in remat.trainable_weights:
        # The step each weight took (its gradient times the rate): informative, and the same.
        step, want = to_numpy(weight) - start[weight.path], expected[weight.path] - start[weight.path]
        if np.abs(want).max() > 0:
            assert_close_to_scale(step, want, RTOL, weight.path)
    # The option is the model's: saved with it, and back on reload.
    assert remat.spec.remat and type(remat).from_config(remat.get_config()).spec.remat


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's program; TensorFlow's and PyTorch's recomputation is counted below")
def test_each_block_is_a_checkpoint_in_jaxs_gradient_program(rng):
    import jax

    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")

    def checkpoints(remat):
        model = keras_vit.create_model("vit_ti16", remat=remat, **TINY)
        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        def loss(weights):
            logits, _ = model.stateless_call(weights, frozen, x, training=True)
            return logits.sum()

        # The gradient's program: a rematerialised block is jax.checkpoint's primitive (named
        # remat2, or checkpoint by other JAX versions), whose forward the backward pass runs
        # again instead of keeping its activations.
        return len(re.findall(r"\b(?:remat2?|checkpoint)\[", str(jax.make_jaxpr(jax.grad(loss))(trainable))))

    assert (checkpoints(False), checkpoints(True)) == (0, TINY["depth"])


@pytest.mark.skipif(BACKEND == "jax", reason="JAX traces a block once and reruns its program (above)")
def test_each_blocks_body_runs_again_in_the_backward_pass(rng, monkeypatch):
    calls = collections.Counter()

    def counted(call):
        @functools.wraps(call)  # the same signature: Keras reads it
        def count_then_call(self, *args, **kwargs):
            calls[type(self).__name__] += 1
            return call(self, *args, **kwargs)

        return count_then_call

    for layer_class in (EncoderBlock, MultiHeadSelfAttention, MlpBlock):
        monkeypatch.setattr(layer_class, "call", counted(layer_class.call))
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    y = np.array([0, 1])
    for remat, runs in ((False, 1), (True, 2)):
        keras.utils.set_random_seed(0)
        model = keras_vit.create_model("vit_ti16", remat=remat, **TINY)
        model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if BACKEND == "torch":  # eager: every step runs the Python; the first also builds the metrics
            model.train_on_batch(x, y)
        calls.clear()  # the model's construction called its layers too
        # TensorFlow runs the Python once, as it traces the step into a graph: a
        # rematerialised block is traced again for the backward pass (tf.recompute_grad).
        model.train_on_batch(x, y)
        # Rematerialised, each block's body runs again in the backward pass: its attention
        # and MLP twice a step (once each without).
        depth = TINY["depth"]
        assert calls == {"EncoderBlock": depth, "MultiHeadSelfAttention": depth * runs, "MlpBlock": depth * runs}, (
            remat,
            calls,
        )
