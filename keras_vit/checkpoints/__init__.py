"""Checkpoints: one reader per file format, one table per upstream layout, resampling.

The names below import on first use (``keras_vit.lazy``): the count of timm's buildable
architectures (``timm_config``, read by ``keras-vit presets``) needs no backend.
"""

import typing

from keras_vit.lazy import package

if typing.TYPE_CHECKING:  # the names, as type checkers, the API reference and keras_vit.lazy.declared read them
    from keras_vit.checkpoints.loader import LoadReport, load_weights
    from keras_vit.checkpoints.resample import resample_position_embedding, resize_grid

__all__, __getattr__, __dir__ = package(__name__, __file__)
