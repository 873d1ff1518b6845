"""The paper's optimisers from a ``RecipeConfig``."""

import keras

from keras_vit.training.schedules import WarmupDecay

OPTIMIZERS = ("adam", "sgd")
# Not decayed: biases, normalisation scales, the class token and position embeddings
# (as timm's no_weight_decay and common ViT practice); kernels are.
NO_WEIGHT_DECAY = ("bias", "beta", "gamma", "token", "embedding")


def make_optimizer(config, total_steps):
    """Adam with decoupled weight decay (pre-training) or SGD with momentum (fine-tuning).

    >>> from keras_vit.training.config import make_config
    >>> type(make_optimizer(make_config("paper_finetune"), total_steps=100)).__name__
    'SGD'
    """
    schedule = WarmupDecay(config.learning_rate, config.warmup_steps, total_steps, config.decay)
    clip = dict(global_clipnorm=config.global_clipnorm) if config.global_clipnorm else {}
    if config.optimizer == "adam":
        optimizer = keras.optimizers.AdamW(
            learning_rate=schedule,
            beta_1=config.beta1,
            beta_2=config.beta2,
            weight_decay=config.weight_decay,
            **clip,
        )
        optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
        return optimizer
    if config.optimizer == "sgd":
        # The paper fine-tunes without weight decay; keep it an option all the same.
        return keras.optimizers.SGD(
            learning_rate=schedule,
            momentum=config.momentum,
            weight_decay=config.weight_decay or None,
            **clip,
        )
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {config.optimizer!r}.")
