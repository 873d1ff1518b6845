"""What the recipes' optimisers are made of, registered with Keras where they are defined, so
that a saved model's compiled optimiser loads wherever keras-vit is imported:

- ``WarmupDecay``: the learning rate, a linear warm-up then linear or cosine decay to zero
  (the paper's);
- ``LayerDecaySGD`` / ``LayerDecayAdamW``: Keras' optimisers with a learning-rate factor per
  weight (layer-wise decay; ``keras_vit.training.optimizers.layer_rates`` computes them).
"""

import math

import keras
from keras import ops

from keras_vit import internals
from keras_vit.vocabulary import DECAYS


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Rises linearly from 0 to ``peak`` over ``warmup_steps``, then decays to 0 at ``total_steps``.

    The paper pre-trains with linear decay and fine-tunes with cosine decay, both after
    a linear warm-up (appendix B.1).

    Steps count optimizer updates. With gradient accumulation the optimizer calls the
    schedule at every micro-batch; ``steps_per_update`` (the accumulation steps) maps those
    calls back to updates, so warm-up and decay do not depend on how a batch is reached.

    >>> schedule = WarmupDecay(1.0, warmup_steps=10, total_steps=110, decay="linear")
    >>> [round(float(schedule(s)), 2) for s in (0, 5, 10, 60, 110)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    >>> accumulated = WarmupDecay(1.0, warmup_steps=10, total_steps=110, steps_per_update=4)
    >>> [round(float(accumulated(s)), 2) for s in (20, 23, 24)]   # micro-batches 20-23: update 5
    [0.5, 0.5, 0.6]
    """

    def __init__(self, peak, warmup_steps, total_steps, decay="linear", steps_per_update=1):
        if decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}.")
        if total_steps <= 0 or warmup_steps < 0:
            raise ValueError(f"need total_steps > 0 and warmup_steps >= 0, got {total_steps}, {warmup_steps}.")
        self.peak = float(peak)
        self.warmup_steps = int(min(warmup_steps, total_steps))
        self.total_steps = int(total_steps)
        self.decay = decay
        if int(steps_per_update) < 1:
            raise ValueError(f"steps_per_update must be >= 1, got {steps_per_update}.")
        self.steps_per_update = int(steps_per_update)

    def __call__(self, step):
        step = ops.floor(ops.cast(step, "float32") / self.steps_per_update)
        warmup = self.peak * step / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1)
        progress = ops.clip(progress, 0.0, 1.0)
        if self.decay == "linear":
            decayed = self.peak * (1.0 - progress)
        else:
            decayed = self.peak * 0.5 * (1.0 + ops.cos(math.pi * progress))
        return ops.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
            "steps_per_update": self.steps_per_update,
        }


class _LayerDecay:
    """An optimizer whose step for each weight uses its rate times ``layer_rates[path]``
    (decoupled weight decay stays at the base rate)."""

    def __init__(self, *args, layer_rates, **kwargs):
        super().__init__(*args, **kwargs)
        self.layer_rates = dict(layer_rates)

    def build(self, variables):
        super().build(variables)
        self._rates = [self.layer_rates.get(variable.path, 1.0) for variable in variables]

    def update_step(self, gradient, variable, learning_rate):
        # The variable's index, as the optimizers' documented subclassing example finds its
        # slots (TensorFlow hands update_step its own variable, which has no Keras path).
        rate = self._rates[internals.variable_index(self, variable)]
        return super().update_step(gradient, variable, learning_rate * rate)

    def get_config(self):
        return {**super().get_config(), "layer_rates": self.layer_rates}


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecaySGD(_LayerDecay, keras.optimizers.SGD):
    """``keras.optimizers.SGD`` with a learning-rate factor per weight (``layer_rates``)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecayAdamW(_LayerDecay, keras.optimizers.AdamW):
    """``keras.optimizers.AdamW`` with a learning-rate factor per weight (``layer_rates``)."""
