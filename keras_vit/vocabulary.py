"""The names some options take, as data with no backend: the layers that implement them,
the spec that checks them and timm's architecture table (``keras-vit presets`` counts what
builds without importing Keras) read them here, and a command's ``--help`` its choices."""

NORM_TYPES = ("layernorm", "rmsnorm")  # layers/layer_norm.py
CROP_MODES = ("center", "squash")  # layers/preprocessing.py: a centre crop, or the whole image squashed
HEAD_FUSIONS = ("mean", "max", "min")  # inspect/attention.py: how attention rollout fuses a block's heads
