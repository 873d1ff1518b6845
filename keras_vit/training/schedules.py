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

    >>> schedule = WarmupDecay(1.0, warmup_steps=10, total_steps=110, decay="linear")
    >>> [round(float(schedule(s)), 2) for s in (0, 5, 10, 60, 110)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def __init__(self, peak, warmup_steps, total_steps, decay="linear"):
        if decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}.")
        if total_steps <= 0 or warmup_steps < 0:
            raise ValueError(f"need total_steps > 0 and warmup_steps >= 0, got {total_steps}, {warmup_steps}.")
        self.peak = float(peak)
        self.warmup_steps = int(min(warmup_steps, total_steps))
        self.total_steps = int(total_steps)
        self.decay = decay

    def __call__(self, step):
        step = ops.cast(step, "float32")
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
        }
