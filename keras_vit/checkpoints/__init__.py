"""Checkpoints: one reader per file format, one table per upstream layout, resampling."""

from keras_vit.checkpoints.loader import LoadReport, load_weights
from keras_vit.checkpoints.resample import resample_position_embedding, resize_grid
