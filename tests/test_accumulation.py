"""Gradient accumulation: K micro-batches of B make the update one batch of K*B makes, and the
learning-rate schedule, warm-up included, counts updates, not micro-batches."""

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, assert_close_to_scale, randomize_keras, to_numpy

import keras_vit
from keras_vit.training import make_config, pretrain
from keras_vit.training.optimizers import make_optimizer

IMAGES, UPDATES = 16, 2  # two updates of 8 images each


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(IMAGES, 16, 16, 3)).astype("float32"), rng.integers(0, 3, IMAGES)


def _trained(start, accumulation, **recipe):
    """``start``'s weights after UPDATES updates of IMAGES / UPDATES images each, reached
    in ``accumulation`` micro-batches; and the learning rate at each micro-batch."""
    model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=8, depth=1, num_classes=3, **TINY_ENCODER)
    model.set_weights(start)
    # The digits recipe's AdamW, clipping and weight decay; a decay over the two updates
    # (no warm-up, whose first rate is 0), so each update has its own rate.
    config = make_config("digits_pretrain", accumulation_steps=accumulation, warmup_steps=0, **recipe)
    optimizer = make_optimizer(config, total_steps=UPDATES)
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images, labels = _data()
    micro_batch = IMAGES // (UPDATES * accumulation)
    model.fit(images, labels, batch_size=micro_batch, epochs=1, shuffle=False, verbose=0)
    assert int(to_numpy(optimizer.iterations)) == UPDATES  # updates, not micro-batches
    # The rate each micro-batch's step reads (the optimizer calls the schedule with them).
    schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
    rates = [float(to_numpy(schedule(step))) for step in range(UPDATES * accumulation)]
    return [to_numpy(w) for w in model.weights], rates


@pytest.fixture(scope="module")
def start():
    keras.utils.set_random_seed(0)
    model = keras_vit.create_model("vit_ti16", image_size=16, patch_size=8, depth=1, num_classes=3, **TINY_ENCODER)
    return [to_numpy(w) for w in randomize_keras(model).weights]


@pytest.mark.parametrize("accumulation", [2, 4])
def test_micro_batches_update_the_weights_as_one_batch(start, accumulation):
    whole, whole_rates = _trained(start, 1)
    accumulated, rates = _trained(start, accumulation)
    # The rate of each update, read at each of its micro-batches: the schedule's step is the update.
    assert whole_rates == pytest.approx([1e-3 * 2, 1e-3])  # digits_pretrain's peak 2e-3, decaying to 0 at 2
    assert rates == pytest.approx(np.repeat(whole_rates, accumulation).tolist())
    for before, one, many in zip(start, whole, accumulated):
        # What the updates moved, relative to its size: float32 sums taken in another order,
        # which Adam's scaling amplifies where a gradient is near its epsilon (measured
        # 4e-5 to 1.1e-3 over the three backends and starting weights), where a schedule
        # counting micro-batches misses by 0.67.
        assert_close_to_scale(many - before, one - before, 1e-2)


# SGD without momentum moves each weight by the rate times the averaged gradient: only the
# float32 sums' order differs between one batch and its micro-batches (measured 2e-7 to 4e-7
# of the update's scale over the three backends), where summing the micro-batches'
# gradients instead of averaging them moves the weights K times as far.
SGD_RTOL = 1e-5


@pytest.mark.parametrize("accumulation", [2, 4])
def test_sgd_micro_batches_update_the_weights_as_one_batch_at_float32_rounding(start, accumulation):
    # Fine-tuning's optimizer, its step linear in the gradient: a scaled gradient shows.
    recipe = dict(optimizer="sgd", momentum=0.0, weight_decay=0.0, global_clipnorm=None, learning_rate=0.5)
    whole, _ = _trained(start, 1, **recipe)
    accumulated, _ = _trained(start, accumulation, **recipe)
    for before, one, many in zip(start, whole, accumulated):
        assert_close_to_scale(many - before, one - before, SGD_RTOL)


def test_a_batch_the_accumulation_cannot_split_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="--accumulation-steps must be in"):
        make_config("digits_pretrain", accumulation_steps=0)
    config = make_config("digits_pretrain", batch_size=30, accumulation_steps=4, output_dir=str(tmp_path))
    with pytest.raises(
        ValueError, match=r"batch_size 30 is not divisible by the 1 device\(s\) times the 4 accumulation"
    ):
        pretrain(config)
    assert list(tmp_path.iterdir()) == []  # no run folder begun


def test_the_recipe_steps_micro_batches_and_counts_updates(tmp_path):
    steps = []
    counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: steps.append(batch))
    config = make_config(
        "digits_pretrain", output_dir=str(tmp_path), epochs=1, steps_per_epoch=2, batch_size=32,
        accumulation_steps=4, depth=1, progress=0, **TINY_ENCODER,
    )  # fmt: skip
    result = pretrain(config, callbacks=[counter])
    assert len(steps) == 2 * 4  # two updates of four micro-batches
    assert int(to_numpy(result.model.optimizer.iterations)) == 2
