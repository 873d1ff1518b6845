"""Pretrained models by name: the preset registry, downloads and the cache, local presets.

``keras_vit.create_model("vit_b16.augreg2_in21k_ft_in1k")`` (``keras_vit.factory``, a floor
above) downloads a published checkpoint once (``download``), builds the model its record
describes (``catalog``) with its pre-processing and class names, and loads it;
``save_preset`` shares a model of your own the same way (``local``).
"""

from keras_vit.presets.catalog import PRESETS, Preset, get_preset, list_presets
from keras_vit.presets.local import save_preset
