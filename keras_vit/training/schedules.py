"""Learning rate: linear warm-up, then linear or cosine decay to zero (the paper's)."""

import math

import keras
from keras import ops

DECAYS = ("linear", "cosine")


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
