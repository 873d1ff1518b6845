"""Training: recipes as data, optimisers and schedules, the distribution seam, the fit driver."""

from keras_vit.training.config import PRESETS, RecipeConfig, make_config, parse_args, run_command_line
from keras_vit.training.run import RecipeInputError, finetune, pretrain
from keras_vit.training.schedules import WarmupDecay
