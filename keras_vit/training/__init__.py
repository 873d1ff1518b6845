"""Training: recipes as data, optimisers and schedules, the distribution seam, the fit driver,
and the fine-tuning techniques (LoRA adapters; layer-wise decay and the moving average are
the optimisers')."""

import typing

from keras_vit.lazy import package

if typing.TYPE_CHECKING:  # the names, as type checkers, the API reference and keras_vit.lazy.declared read them
    from keras_vit.optimizers import WarmupDecay
    from keras_vit.training.config import PRESETS, RecipeConfig, make_config
    from keras_vit.training.lora import add_lora, load_adapter, merge_lora, save_adapter
    from keras_vit.training.run import RecipeInputError, finetune, pretrain

# Imported on first use (``keras_vit.lazy``): a recipe's flags (a command's ``--help``) read
# the config with no backend.
__all__, __getattr__, __dir__ = package(__name__, __file__)
