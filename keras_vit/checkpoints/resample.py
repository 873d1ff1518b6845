"""The position embeddings' resampling, for the loader: numpy only, so it lives below the
models, in ``keras_vit.resampling`` (``keras_vit.resize`` uses it too); its names stay
importable from here."""

from keras_vit.resampling import METHODS, resample_position_embedding, resize_grid

__all__ = ["METHODS", "resample_position_embedding", "resize_grid"]
