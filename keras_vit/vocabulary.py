"""The names some spec options take, as data with no backend: the layers that implement
them, the spec that checks them and timm's architecture table (``keras-vit presets``
counts what builds without importing Keras) read them here."""

NORM_TYPES = ("layernorm", "rmsnorm")  # layers/layer_norm.py
CROP_MODES = ("center", "squash")  # layers/preprocessing.py: a centre crop, or the whole image squashed
