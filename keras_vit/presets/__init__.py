"""Pretrained models by name: the preset registry, downloads, local presets."""
