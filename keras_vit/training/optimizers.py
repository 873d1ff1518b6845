"""The paper's optimisers from a ``RecipeConfig``, with layer-wise learning-rate decay and
a moving average of the weights when it asks for them."""

import re

import keras

from keras_vit import internals
from keras_vit.models.graph import TASK_LAYERS
from keras_vit.optimizers import LayerDecayAdamW, LayerDecaySGD, WarmupDecay
from keras_vit.vocabulary import OPTIMIZERS

# Not decayed: biases, normalisation scales, the class token and position embeddings
# (as timm's no_weight_decay and common ViT practice); kernels are.
NO_WEIGHT_DECAY = ("bias", "beta", "gamma", "token", "embedding")


def make_optimizer(config, total_steps, model=None):
    """Adam with decoupled weight decay (pre-training) or SGD with momentum (fine-tuning).

    ``total_steps`` counts optimizer updates. With ``config.accumulation_steps`` K > 1 the
    optimizer averages the gradients of K micro-batches before each update (Keras'
    ``gradient_accumulation_steps``; clipping and weight decay act on the average), and the
    schedule advances once per update. ``config.layer_decay`` scales each of ``model``'s
    weights' rate (``layer_rates``); ``config.ema`` keeps Keras' moving average of them.

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
    if config.ema:
        common.update(use_ema=True, ema_momentum=config.ema)
    decayed = bool(config.layer_decay)
    if decayed:
        common.update(layer_rates=layer_rates(model, config.layer_decay))
    if config.optimizer == "adam":
        optimizer = (LayerDecayAdamW if decayed else keras.optimizers.AdamW)(
            learning_rate=schedule,
            beta_1=config.beta1,
            beta_2=config.beta2,
            weight_decay=config.weight_decay,
            **common,
        )
        optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    elif config.optimizer == "sgd":
        # The paper fine-tunes without weight decay; keep it an option all the same.
        optimizer = (LayerDecaySGD if decayed else keras.optimizers.SGD)(
            learning_rate=schedule,
            momentum=config.momentum,
            weight_decay=config.weight_decay or None,
            **common,
        )
    else:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {config.optimizer!r}.")
    if config.global_clipnorm and keras.backend.backend() == "tensorflow":
        # Under a mirrored or TPU strategy, the norm of the whole batch's gradient.
        internals.clip_after_summing_replicas(optimizer)
    return optimizer


def layer_rates(model, decay):
    """Each weight's learning-rate factor for layer-wise decay (BEiT's, as timm's
    ``param_groups_layer_decay``): ``decay ** (depth - i)`` in block ``i``, ``decay ** (depth + 1)``
    in the embeddings (and a hybrid's ResNet stem), 1 in the final norm, an attention-pooling
    head and the classifier.

    >>> import keras_vit
    >>> model = keras_vit.create_model("vit_ti16", image_size=16, num_classes=2, depth=2)
    >>> rates = layer_rates(model, 0.5)
    >>> [rates[p] for p in ("position_embedding/embedding", "block_0/norm1/gamma", "block_1/norm1/gamma", "head/bias")]
    [0.125, 0.25, 0.5, 1.0]
    """
    depth = model.spec.depth
    rates = {}
    for variable in model.weights:
        block = re.match(r"block_(\d+)/", variable.path)
        if block:
            layer = int(block[1]) + 1
        elif variable.path.startswith(("encoder_norm/", "pooling/", "fc_norm/", *TASK_LAYERS)):
            layer = depth + 1
        else:  # the patch, class-token, register and position embeddings, the pre-norm, a hybrid's stem
            layer = 0
        rates[variable.path] = float(decay ** (depth + 1 - layer))
    return rates
