"""Pretrained models by name: the preset registry, downloads and the cache, local presets.

``keras_vit.create_model("vit_b16.augreg2_in21k_ft_in1k")`` (``keras_vit.factory``, a floor
above) downloads a published checkpoint once (``download``), builds the model its record
describes (``catalog``) with its pre-processing and class names, and loads it;
``save_preset`` shares a model of your own the same way (``local``, imported on first use:
the catalog alone, ``keras-vit presets``, needs no backend).
"""

from keras_vit.presets.catalog import PRESETS, Preset, get_preset, list_presets


def __getattr__(name):
    if name == "save_preset":
        from keras_vit.presets.local import save_preset

        return save_preset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
