"""Training: recipes as data, optimisers and schedules, the distribution seam, the fit driver,
and the fine-tuning techniques (LoRA adapters; layer-wise decay and the moving average are
the optimisers')."""

from keras_vit.optimizers import WarmupDecay
from keras_vit.training.config import PRESETS, RecipeConfig, make_config
from keras_vit.training.lora import add_lora, load_adapter, merge_lora, save_adapter
from keras_vit.training.run import RecipeInputError, finetune, pretrain
