"""Training: recipes as data, optimisers and schedules, the distribution seam, the fit driver."""

from keras_vit.training.config import PRESETS, RecipeConfig, make_config, parse_args
from keras_vit.training.run import finetune, pretrain
from keras_vit.training.schedules import WarmupDecay
