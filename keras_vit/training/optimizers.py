"""The paper's optimisers from a ``RecipeConfig``."""

import keras

from keras_vit.training.schedules import WarmupDecay

OPTIMIZERS = ("adam", "sgd")
# Not decayed: biases, normalisation scales, the class token and position embeddings
# (as timm's no_weight_decay and common ViT practice); kernels are.
NO_WEIGHT_DECAY = ("bias", "beta", "gamma", "token", "embedding")


def make_optimizer(config, total_steps):
    """Adam with decoupled weight decay (pre-training) or SGD with momentum (fine-tuning).

    ``total_steps`` counts optimizer updates. With ``config.accumulation_steps`` K > 1 the
    optimizer averages the gradients of K micro-batches before each update (Keras'
    ``gradient_accumulation_steps``; clipping and weight decay act on the average), and the
    schedule advances once per update.

    >>> from keras_vit.training.config import make_config
    >>> type(make_optimizer(make_config("paper_finetune"), total_steps=100)).__name__
    'SGD'
    """
    accumulation = config.accumulation_steps
    schedule = WarmupDecay(
        config.learning_rate, config.warmup_steps, total_steps, config.decay, steps_per_update=accumulation
    )
    common = dict(global_clipnorm=config.global_clipnorm) if config.global_clipnorm else {}
    if accumulation > 1:
        common.update(gradient_accumulation_steps=accumulation)
    if config.optimizer == "adam":
        optimizer = keras.optimizers.AdamW(
            learning_rate=schedule,
            beta_1=config.beta1,
            beta_2=config.beta2,
            weight_decay=config.weight_decay,
            **common,
        )
        optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
        return optimizer
    if config.optimizer == "sgd":
        # The paper fine-tunes without weight decay; keep it an option all the same.
        return keras.optimizers.SGD(
            learning_rate=schedule,
            momentum=config.momentum,
            weight_decay=config.weight_decay or None,
            **common,
        )
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {config.optimizer!r}.")
